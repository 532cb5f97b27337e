package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Exit statuses; the package documentation and the help text list them.
const (
	exitOK          = 0   // success, also for --help
	exitFailure     = 1   // a runtime failure: Redis or a store unreachable or failing
	exitUsage       = 2   // a usage error: see usageError
	exitUnsafe      = 3   // the demo saw fencing fail: see unsafeError
	exitInterrupted = 130 // SIGINT ended the command (128 + 2, as shells report it)
)

func main() {
	// go-redis logs failed dials to stderr; the error it returns says it.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// command is a subcommand: its help and how to run it.
type command struct {
	name     string
	synopsis string // the usage line after "redfence "
	summary  string // one line for the command list
	doc      string // the paragraphs of its help
	flags    func() *flag.FlagSet
	run      func(ctx context.Context, c *command, args []string, stdout io.Writer) error
}

var commands = []*command{
	{
		name:     "demo",
		synopsis: "demo [flags]",
		summary:  "play the pause scenario: a paused holder's late write is refused",
		doc:      demoDoc,
		flags:    func() *flag.FlagSet { return demoFlags(new(demoConfig)) },
		run:      demo,
	},
	{
		name:     "inspect",
		synopsis: "inspect NAME [flags]",
		summary:  "print the state of the lock NAME, as text or JSON",
		doc:      inspectDoc,
		flags:    func() *flag.FlagSet { return inspectFlags(new(inspectConfig)) },
		run:      inspect,
	},
	{
		name:     "list",
		synopsis: "list [flags]",
		summary:  "list the locks held under a prefix, on a server or a Cluster",
		doc:      listDoc,
		flags:    func() *flag.FlagSet { return listFlags(new(listConfig)) },
		run:      list,
	},
	{
		name:     "unlock",
		synopsis: "unlock --force NAME [flags]",
		summary:  "force the lock NAME open: the safe way out of a stuck lock",
		doc:      unlockDoc,
		flags:    func() *flag.FlagSet { return unlockFlags(new(unlockConfig)) },
		run:      unlock,
	},
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// commandNames lists the commands for error messages.
func commandNames() string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	return strings.Join(append(names, "help"), ", ")
}

// execute runs the command line args and returns the exit status. Output
// goes to stdout, help included; errors go to stderr.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout)
	code := exitCode(ctx, err)
	if err == nil {
		return code
	}
	fmt.Fprintf(stderr, "redfence: %v\n", err)
	if ue := (usageError{}); errors.As(err, &ue) {
		help := "redfence --help"
		if ue.cmd != "" {
			help = "redfence " + ue.cmd + " --help"
		}
		fmt.Fprintf(stderr, "Run '%s' for usage.\n", help)
	}
	return code
}

// exitCode maps run's error to an exit status.
func exitCode(ctx context.Context, err error) int {
	var ue usageError
	var unsafe *unsafeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &unsafe):
		return exitUnsafe
	case ctx.Err() != nil:
		return exitInterrupted
	}
	return exitFailure
}

// run dispatches args to a command.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{err: fmt.Errorf("no command: want one of %s", commandNames())}
	}
	if args[0] == "help" || isHelpFlag(args[0]) {
		return help(args[1:], stdout)
	}
	c := lookup(args[0])
	if c == nil {
		return usageError{err: fmt.Errorf("unknown command %q: want one of %s", args[0], commandNames())}
	}
	if err := c.run(ctx, c, args[1:], stdout); err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}

// help prints the help of the command named in args, or of them all.
func help(args []string, w io.Writer) error {
	switch {
	case len(args) == 0, len(args) == 1 && isHelpFlag(args[0]):
		writeHelp(w)
		return nil
	case len(args) == 1:
		if c := lookup(args[0]); c != nil {
			writeCommandHelp(w, c)
			writeExitStatus(w)
			return nil
		}
		return usageError{err: fmt.Errorf("help: unknown command %q", args[0])}
	}
	return usageError{err: fmt.Errorf("help takes at most one command, got %q", args)}
}

func isHelpFlag(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }
