package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

const inspectDoc = `Prints the state of the lock NAME, read in one atomic step without taking
or changing it.`

type inspectConfig struct {
	redisAddr string
	prefix    string
	json      bool
}

func inspectFlags(cfg *inspectConfig) *flag.FlagSet {
	fs := newFlagSet("inspect")
	fs.StringVar(&cfg.redisAddr, "redis", "", "read from the Redis server at `host:port` (required)")
	fs.StringVar(&cfg.prefix, "prefix", reentrant.DefaultPrefix, "key prefix `P` of the locks: the lock NAME lives at P:{NAME}")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object instead of text")
	return fs
}

// inspect runs the inspect command.
func inspect(ctx context.Context, c *command, args []string, stdout io.Writer) error {
	var cfg inspectConfig
	pos, help, err := parseArgs(c, inspectFlags(&cfg), args, stdout)
	switch {
	case help || err != nil:
		return err
	case len(pos) == 0:
		return usagef(c.name, "missing lock NAME")
	case len(pos) > 1:
		return usagef(c.name, "inspect takes one lock NAME, got %q", pos)
	case cfg.redisAddr == "":
		return usagef(c.name, "missing --redis host:port")
	}
	name := pos[0]
	if err := lua.CheckName(name); err != nil {
		return usagef(c.name, "invalid lock NAME: %v", err)
	}
	if err := checkAddr(c.name, cfg.redisAddr); err != nil {
		return err
	}
	if err := checkPrefix(c.name, cfg.prefix); err != nil {
		return err
	}

	rdb := redis.NewClient(&redis.Options{Addr: cfg.redisAddr})
	defer rdb.Close()
	locks, err := reentrant.New(rdb, reentrant.WithPrefix(cfg.prefix))
	if err != nil {
		return err
	}
	defer locks.Close()
	st, err := locks.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		type ended struct {
			Owner string `json:"owner"`
			Token uint64 `json:"token"`
			How   string `json:"how"`
		}
		es := []ended{}
		for _, e := range st.Ended {
			es = append(es, ended{string(e.Owner), uint64(e.Token), how(e)})
		}
		return enc.Encode(struct {
			Name      string   `json:"name"`
			Held      bool     `json:"held"`
			Owner     string   `json:"owner,omitempty"`
			Depth     int64    `json:"depth"`
			Token     uint64   `json:"token"`
			TTLMillis int64    `json:"ttl_ms"`
			LastToken uint64   `json:"last_token"`
			Levels    []string `json:"levels,omitempty"`
			Waiters   int64    `json:"waiters"`
			Ended     []ended  `json:"ended"`
		}{st.Name, st.Held, string(st.Owner), st.Depth, uint64(st.Token), st.TTL.Milliseconds(), uint64(st.LastToken), st.Levels, st.Waiters, es})
	}
	fmt.Fprintf(stdout, "lock        %q (prefix %q)\n", st.Name, cfg.prefix)
	if !st.Held {
		fmt.Fprintf(stdout, "state       free\n")
	} else {
		fmt.Fprintf(stdout, "state       held\nowner       %s\ndepth       %d\ntoken       %d\nlease left  %s\nlevels      %s\n",
			st.Owner, st.Depth, st.Token, st.TTL.Round(time.Millisecond), strings.Join(st.Levels, " "))
	}
	fmt.Fprintf(stdout, "last token  %d\nwaiters     %d\n", st.LastToken, st.Waiters)
	for _, e := range st.Ended {
		fmt.Fprintf(stdout, "%-11s token %d of %s\n", how(e), e.Token, e.Owner)
	}
	return nil
}

// how says how an ownership ended, as inspect prints it.
func how(e reentrant.Ended) string {
	if e.Expired {
		return "expired"
	}
	return "released"
}
