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
	if *asJSON {
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
	fmt.Fprintf(stdout, "lock        %q (prefix %q)\n", st.Name, *prefix)
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
