package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/reentrant"
)

const listDoc = `Lists the locks held under the key prefix: on one server, or on every
primary of a Redis Cluster (found by asking the server of --redis). The keys
are found with SCAN, never KEYS, and each lock is read in one atomic step of
its own (reentrant.Client.List): it is a walk, not a snapshot, so a lock
taken or released meanwhile may or may not be listed, while one held
throughout is listed once.

The text form is a table: NAME, TOKEN, OWNER, DEPTH, TTL (what is left of
the lease, a Go duration), WAITERS (Lock calls queued), META. A read-write
lock (reentrant.RWMutex) or a semaphore (reentrant.Semaphore) held under
the prefix has a row per holder, META saying "write", "read" (TOKEN: the
epoch it reads) or "permit slot N". --json prints one JSON object per line
instead, as the locks are found: the object inspect --json prints for that
lock, on one line; a read-write lock's or a semaphore's has "holders", one
such object per holder. A key under the prefix that holds
other data does not stop the walk: it is reported on stderr at the end, and
the exit status is 1.`

// listConfig is inspect's: a target and --json.
type listConfig = inspectConfig

func listFlags(cfg *listConfig) *flag.FlagSet {
	return cfg.jsonFlags("list", "read from the Redis server at `host:port`, or the Cluster it belongs to (required)",
		"print one JSON object per lock and line instead of a table")
}

// list runs the list command.
func list(ctx context.Context, c *command, args []string, stdout io.Writer) error {
	var cfg listConfig
	pos, help, err := parseArgs(c, listFlags(&cfg), args, stdout)
	switch {
	case help || err != nil:
		return err
	case len(pos) > 0:
		return usagef(c.name, "list takes no argument, got %q", pos)
	case cfg.redisAddr == "":
		return usagef(c.name, "missing --redis host:port")
	}
	if err := checkAddr(c.name, cfg.redisAddr); err != nil {
		return err
	}
	if err := checkPrefix(c.name, cfg.prefix); err != nil {
		return err
	}
	locks, closeLocks, err := cfg.open(ctx)
	if err != nil {
		return err
	}
	defer closeLocks()
	out := newListWriter(stdout, cfg.prefix, cfg.json)
	var errs []error
	for st, err := range locks.List(ctx) {
		var op *reentrant.OpError
		switch {
		case err != nil && errors.As(err, &op) && op.Name != "":
			errs = append(errs, err) // one name's: the walk goes on
		case err != nil:
			_ = out.flush() // what was found before the walk failed
			return errors.Join(append(errs, err)...)
		default:
			if err := out.add(st); err != nil {
				return err
			}
		}
	}
	if err := out.flush(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// listWriter prints list's output: a JSON line per lock as it comes, or a
// table at the end.
type listWriter struct {
	w      io.Writer
	prefix string
	json   *json.Encoder
	table  *tabwriter.Writer
	n      int
}

func newListWriter(w io.Writer, prefix string, asJSON bool) *listWriter {
	l := &listWriter{w: w, prefix: prefix}
	if asJSON {
		l.json = json.NewEncoder(w)
		return l
	}
	l.table = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(l.table, "NAME\tTOKEN\tOWNER\tDEPTH\tTTL\tWAITERS\tMETA")
	return l
}

func (l *listWriter) add(st reentrant.State) error {
	l.n++
	v := newLockView(l.prefix, st)
	if l.json != nil {
		return l.json.Encode(v)
	}
	rows := []lockView{v}
	if len(v.Holders) > 0 {
		rows = v.Holders // a read-write lock or a semaphore: a row per holder
	}
	for _, v := range rows {
		if _, err := fmt.Fprintf(l.table, "%s\t%d\t%s\t%d\t%s\t%d\t%s\n", cell(v.Name), v.Token, cell(v.Owner), v.Depth, v.TTL, v.Waiters, cell(v.Meta)); err != nil {
			return err
		}
	}
	return nil
}

func (l *listWriter) flush() error {
	if l.table == nil {
		return nil
	}
	if l.n == 0 {
		_, err := fmt.Fprintf(l.w, "no lock held under prefix %s\n", textString(l.prefix))
		return err
	}
	return l.table.Flush()
}

// cell is a value in the table: textString's form (quoted when it holds a
// space at an end, a tab or another unprintable character), "-" for an
// empty value, and a value "-" quoted.
func cell(s string) string {
	switch s {
	case "":
		return "-"
	case "-":
		return strconv.Quote(s)
	}
	return textString(s)
}

// open opens a lock client on the Redis of --redis, built with opts too, and
// returns it with what closes it. A server in cluster mode is reached as
// its Cluster.
func (t *target) open(ctx context.Context, opts ...reentrant.ClientOption) (*reentrant.Client, func(), error) {
	rdb, err := dial(ctx, t.redisAddr)
	if err != nil {
		return nil, nil, err
	}
	locks, err := reentrant.New(rdb, append([]reentrant.ClientOption{reentrant.WithPrefix(t.prefix)}, opts...)...)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return locks, func() { _ = locks.Close(); _ = rdb.Close() }, nil
}

// unsure reports a Redis error reply that says nothing of the server's
// mode: it is loading, denies the command, wants a login, or is a Cluster
// node that cannot serve now.
func unsure(err error) bool {
	for _, p := range []string{"LOADING", "NOPERM", "NOAUTH", "WRONGPASS", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "MOVED", "ASK", "BUSY", "ERR max number of clients"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// dial returns a client of the server at addr, or of its Cluster when the
// server runs in cluster mode (INFO's cluster_enabled; a server that
// refuses the section, such as an embedded one, is taken as standalone; an
// error that says nothing of the mode, see unsure, is returned).
func dial(ctx context.Context, addr string) (redis.UniversalClient, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	info, err := rdb.Info(ctx, "cluster").Result()
	var refused redis.Error
	switch {
	case err != nil && errors.As(err, &refused) && !unsure(err):
		return rdb, nil // a server without the section has no cluster mode
	case err != nil: // a network error, or a reply that says nothing of the mode
		_ = rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", addr, err)
	}
	if !strings.Contains(info, "cluster_enabled:1") {
		return rdb, nil
	}
	_ = rdb.Close()
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}), nil
}
