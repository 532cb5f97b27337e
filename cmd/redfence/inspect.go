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

	"github.com/redfence/redfence/reentrant"
)

func inspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("redis", "", "Redis address host:port (required)")
	prefix := fs.String("prefix", reentrant.DefaultPrefix, "key prefix")
	asJSON := fs.Bool("json", false, "print JSON")
	// Accept the name before or after the flags.
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" || *addr == "" {
		fs.Usage()
		return fmt.Errorf("inspect needs a lock name and --redis")
	}
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	c, err := reentrant.New(rdb, reentrant.WithPrefix(*prefix))
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.Inspect(ctx, name)
	if err != nil {
		return err
	}
	rels, err := c.Releases(ctx, name)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		type release struct {
			Level     string `json:"level"`
			Owner     string `json:"owner"`
			Token     uint64 `json:"token"`
			TTLMillis int64  `json:"kept_ms"`
		}
		rs := []release{}
		for _, r := range rels {
			rs = append(rs, release{r.Level, string(r.Owner), uint64(r.Token), r.TTL.Milliseconds()})
		}
		return enc.Encode(struct {
			Name      string    `json:"name"`
			Held      bool      `json:"held"`
			Owner     string    `json:"owner,omitempty"`
			Depth     int64     `json:"depth"`
			Token     uint64    `json:"token"`
			TTLMillis int64     `json:"ttl_ms"`
			LastToken uint64    `json:"last_token"`
			Levels    []string  `json:"levels,omitempty"`
			Waiters   int64     `json:"waiters"`
			Releases  []release `json:"recent_releases"`
		}{st.Name, st.Held, string(st.Owner), st.Depth, uint64(st.Token), st.TTL.Milliseconds(), uint64(st.LastToken), st.Levels, st.Waiters, rs})
	}
	fmt.Fprintf(stdout, "lock        %q (prefix %q)\n", st.Name, *prefix)
	if !st.Held {
		fmt.Fprintf(stdout, "state       free\n")
	} else {
		ttl := "no expiry (not set by redfence)"
		if st.TTL > 0 {
			ttl = st.TTL.Round(time.Millisecond).String()
		}
		fmt.Fprintf(stdout, "state       held\nowner       %s\ndepth       %d\ntoken       %d\nlease left  %s\nlevels      %s\n",
			st.Owner, st.Depth, st.Token, ttl, strings.Join(st.Levels, " "))
	}
	fmt.Fprintf(stdout, "last token  %d\nwaiters     %d\n", st.LastToken, st.Waiters)
	for _, r := range rels {
		fmt.Fprintf(stdout, "released    token %d by %s (level %s), remembered %s more\n", r.Token, r.Owner, r.Level, r.TTL.Round(time.Millisecond))
	}
	return nil
}
