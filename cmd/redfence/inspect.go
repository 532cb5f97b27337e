package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/reentrant"
)

const inspectDoc = `Prints the state of the lock NAME, read in one atomic step without taking
or changing it. The text form has one line per field, labelled with the JSON
names below (ttl_ms aside); durations print as Go durations (12.345s) and
"none" stands for an absent value, such as the lease of a free lock.

--json prints one object with these fields, always present, in this order:
  name        string    the lock name
  prefix      string    the key prefix (--prefix)
  held        bool      whether an ownership holds the lock
  owner       string    the holder's owner ID; "" when free
  depth       int       the reentry depth; 0 when free
  token       int       the holder's fencing token; 0 when free
  lease       string    "active" when held, "none" when free,
                        "no_expiry" when held without an expiry
  ttl         string    what is left of the lease as a Go duration ("12.345s");
                        "none" when free, "no expiry" without an expiry
  ttl_ms      int       the same in whole milliseconds; 0 unless lease is "active"
  meta        string    the holder's metadata (WithMetadata), or an election
                        term's value; "" when free or none
  levels      [string]  the IDs of the hold's levels; [] when free
  last_token  int       what the name's next token is above: with time tokens
                        (the default) the floor of the name's hash slot, shared
                        with the slot's other names; with strict tokens the
                        name's counter; 0 if none
  waiters     int       Lock calls queued for the name
  forced      object    the last forced unlock (redfence unlock --force), while
                        its record lives (until the forced lease would have
                        ended), as {"token": int, "at": string (RFC 3339),
                        "by": string}; null if none
  found       bool      false when Redis holds nothing for NAME under the prefix:
                        no hold, waiter, counter or record (a wrong --prefix, or
                        a name never locked there); every other field is then
                        empty. The text form is then one line: "NAME: no state
                        under prefix P (never locked there)"
  holders     [object]  list only, for a read-write lock or a semaphore
                        (reentrant.RWMutex, Semaphore): each holder as an
                        object of these fields, meta "write", "read" or
                        "permit slot N"; absent for a lock
A released name keeps no history: its last owner and how its ownerships
ended are not recorded. Fields may be added; none is renamed. The exit
status is 0 whether or not the name was found.`

type inspectConfig struct {
	target
	json bool
}

func inspectFlags(cfg *inspectConfig) *flag.FlagSet {
	return cfg.jsonFlags("inspect", "read from the Redis server at `host:port` (required)", "print one JSON object instead of text")
}

// jsonFlags returns command's flags: --redis and --prefix (target.flags),
// and --json.
func (cfg *inspectConfig) jsonFlags(command, redisUsage, jsonUsage string) *flag.FlagSet {
	fs := newFlagSet(command)
	cfg.flags(fs, redisUsage)
	fs.BoolVar(&cfg.json, "json", false, jsonUsage)
	return fs
}

// inspect runs the inspect command.
func inspect(ctx context.Context, c *command, args []string, stdout io.Writer) error {
	var cfg inspectConfig
	pos, help, err := parseArgs(c, inspectFlags(&cfg), args, stdout)
	if help || err != nil {
		return err
	}
	_, st, closeLocks, err := cfg.inspect(ctx, c, pos)
	if err != nil {
		return err
	}
	defer closeLocks()
	v := newLockView(cfg.prefix, st)
	if cfg.json {
		return v.writeJSON(stdout)
	}
	return v.writeText(stdout)
}

// The values of lockView.Lease.
const (
	leaseNone     = "none"      // the lock is free
	leaseActive   = "active"    // held; TTL and TTLMillis say what is left
	leaseNoExpiry = "no_expiry" // held with no expiry: a negative State.TTL
)

// lockView is what inspect prints, in the same order in both forms: the
// JSON object's fields, and the text lines labelled with their JSON names.
// Tag text:"-" leaves a field out of the text; text:"none" prints its zero
// value, and any empty list, as "none". A new field is one line here and
// one in newLockView; the package documentation lists the JSON fields.
type lockView struct {
	Name      string      `json:"name"`
	Prefix    string      `json:"prefix"`
	Held      bool        `json:"held"`
	Owner     string      `json:"owner" text:"none"`
	Depth     int64       `json:"depth"`
	Token     uint64      `json:"token" text:"none"`
	Lease     string      `json:"lease"`
	TTL       string      `json:"ttl"`
	TTLMillis int64       `json:"ttl_ms" text:"-"`
	Meta      string      `json:"meta" text:"none"`
	Levels    []string    `json:"levels" text:"none"`
	LastToken uint64      `json:"last_token" text:"none"`
	Waiters   int64       `json:"waiters"`
	Forced    *forcedView `json:"forced" text:"none"`
	Found     bool        `json:"found" text:"-"` // printed by writeText itself, with Prefix
	// Holders: a read-write lock's or a semaphore's (list only), each
	// holder's own view, its Meta "write", "read" or "permit slot N".
	Holders []lockView `json:"holders,omitempty" text:"-"`
}

// forcedView is a reentrant.State's Forced as inspect prints it.
type forcedView struct {
	Token uint64 `json:"token"`
	At    string `json:"at"` // RFC 3339, UTC, milliseconds
	By    string `json:"by"`
}

func (f forcedView) String() string {
	return fmt.Sprintf("token %d at %s by %s", f.Token, f.At, textString(f.By))
}

func newLockView(prefix string, st reentrant.State) lockView {
	v := lockView{
		Name:      st.Name,
		Prefix:    prefix,
		Held:      st.Held,
		Owner:     string(st.Owner),
		Depth:     st.Depth,
		Token:     uint64(st.Token),
		Levels:    append([]string{}, st.Levels...),
		LastToken: uint64(st.LastToken),
		Meta:      st.Meta,
		Waiters:   st.Waiters,
		Found:     found(st),
	}
	v.Lease, v.TTL, v.TTLMillis = lease(st)
	if f := st.Forced; f != nil {
		v.Forced = &forcedView{Token: uint64(f.Token), At: f.At.UTC().Format("2006-01-02T15:04:05.000Z07:00"), By: f.By}
	}
	for _, h := range st.Holders {
		hv := newLockView(prefix, h)
		hv.Waiters = st.Waiters
		if h.Meta == "permit" {
			hv.Meta = fmt.Sprintf("permit slot %d", h.Slot)
		}
		v.Holders = append(v.Holders, hv)
	}
	return v
}

// found reports whether st shows anything Redis holds for the name: a
// hold, a waiter, a token issued, a forced unlock's record. Nothing means
// no key of the name exists under the prefix inspected, which a wrong
// --prefix would otherwise pass off as a free lock.
func found(st reentrant.State) bool {
	return st.Held || st.Waiters > 0 || st.LastToken != 0 || st.Forced != nil
}

// notFound is what inspect and unlock say of a name with no state under
// prefix.
func notFound(prefix string) string {
	return "no state under prefix " + textString(prefix) + " (never locked there)"
}

// lease describes what is left of st's lease: its kind, a Go duration
// or "none", and whole milliseconds (0 unless the lease is active).
func lease(st reentrant.State) (kind, ttl string, ms int64) {
	switch {
	case !st.Held:
		return leaseNone, "none", 0
	case st.TTL < 0:
		return leaseNoExpiry, "no expiry", 0
	}
	return leaseActive, st.TTL.Truncate(time.Millisecond).String(), st.TTL.Milliseconds()
}

func (v lockView) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeText prints one line per field; for a name with no state under the
// prefix, one line that says so.
func (v lockView) writeText(w io.Writer) error {
	if !v.Found {
		_, err := fmt.Fprintf(w, "%s: %s\n", textString(v.Name), notFound(v.Prefix))
		return err
	}
	var b strings.Builder
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		if f.Tag.Get("text") == "-" {
			continue
		}
		label, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		for _, line := range textLines(rv.Field(i), f.Tag.Get("text") == "none") {
			fmt.Fprintf(&b, "%-12s%s\n", label, line)
		}
	}
	fmt.Fprintf(&b, "%-12s%s\n", "found", "yes")
	_, err := io.WriteString(w, b.String())
	return err
}

// textLines formats one field: a list of strings on one line, any other
// list one element a line, a bool as yes or no.
func textLines(v reflect.Value, none bool) []string {
	if none && (v.IsZero() || v.Kind() == reflect.Slice && v.Len() == 0) {
		return []string{"none"}
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return []string{"yes"}
		}
		return []string{"no"}
	case reflect.String:
		return []string{textString(v.String())}
	case reflect.Slice:
		var out []string
		for i := range v.Len() {
			out = append(out, textLines(v.Index(i), false)...)
		}
		if v.Type().Elem().Kind() == reflect.String {
			return []string{strings.Join(out, " ")}
		}
		return out
	}
	return []string{fmt.Sprint(v.Interface())}
}

// textString quotes s if it is empty, starts or ends with a space or holds
// an unprintable character, so that each value reads unambiguously as the
// rest of its line.
func textString(s string) string {
	if s == "" || strings.TrimSpace(s) != s || strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// target is the lock inspect and unlock act on: one NAME, on the Redis
// server of --redis, under the key prefix of --prefix.
type target struct {
	redisAddr string
	prefix    string
}

// flags defines --redis, described by redisUsage, and --prefix in fs.
func (t *target) flags(fs *flag.FlagSet, redisUsage string) {
	fs.StringVar(&t.redisAddr, "redis", "", redisUsage)
	fs.StringVar(&t.prefix, "prefix", scripts.DefaultPrefix, "key prefix `P` of the locks: the lock NAME lives at P:{NAME}")
}

// inspect checks the command's one lock NAME in pos, --redis and --prefix
// (usage errors), opens a lock client on that Redis (or its Cluster: see
// dial), built with opts too,
// and reads the lock's state (st.Name is the NAME). It returns the client,
// the state, and what closes the client; on an error nothing is left open.
func (t *target) inspect(ctx context.Context, c *command, pos []string, opts ...reentrant.ClientOption) (*reentrant.Client, reentrant.State, func(), error) {
	var none reentrant.State
	switch {
	case len(pos) == 0:
		return nil, none, nil, usagef(c.name, "missing lock NAME")
	case len(pos) > 1:
		return nil, none, nil, usagef(c.name, "%s takes one lock NAME, got %q", c.name, pos)
	case t.redisAddr == "":
		return nil, none, nil, usagef(c.name, "missing --redis host:port")
	}
	name := pos[0]
	if err := scripts.CheckName(name); err != nil {
		return nil, none, nil, usagef(c.name, "invalid lock NAME: %v", err)
	}
	if err := checkAddr(c.name, t.redisAddr); err != nil {
		return nil, none, nil, err
	}
	if err := checkPrefix(c.name, t.prefix); err != nil {
		return nil, none, nil, err
	}
	locks, closeLocks, err := t.open(ctx, opts...)
	if err != nil {
		return nil, none, nil, err
	}
	st, err := locks.Inspect(ctx, name)
	if err != nil {
		closeLocks()
		return nil, none, nil, err
	}
	return locks, st, closeLocks, nil
}
