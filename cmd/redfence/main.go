// Command redfence demonstrates and inspects redfence locks.
//
//	redfence demo [--redis host:port] [--store memory|redis|postgres|sqlite] [--postgres URL]
//	redfence inspect NAME --redis host:port [--prefix P] [--json]
//
// demo plays Kleppmann's pause scenario: a worker holding a lock is paused
// past its lease, a second worker takes the lock with a higher token and
// writes, and the first worker's late write is refused by the fenced store.
// With no flags it runs on an embedded Redis (miniredis) and an in-memory
// store, so it needs nothing installed.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "redfence:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  redfence demo [--redis host:port] [--store memory|redis|postgres|sqlite] [--postgres URL]
  redfence inspect NAME --redis host:port [--prefix P] [--json]
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("no command")
	}
	switch args[0] {
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "inspect":
		return inspect(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
