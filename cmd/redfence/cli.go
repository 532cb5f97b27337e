package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/redfence/redfence/internal/scripts"
)

// usageError is a mistake on the command line (an unknown command or flag,
// a bad flag value, a missing or extra argument): exit status 2.
type usageError struct {
	cmd string // the command whose usage was wrong; empty for the top level
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(cmd, format string, args ...any) error {
	return usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// unsafeError reports that the demo saw fencing fail, such as a stale write
// the store accepted: exit status 3.
type unsafeError struct{ err error }

func (e *unsafeError) Error() string { return "SAFETY CHECK FAILED: " + e.err.Error() }
func (e *unsafeError) Unwrap() error { return e.err }

func unsafef(format string, args ...any) error {
	return &unsafeError{err: fmt.Errorf(format, args...)}
}

// newFlagSet returns a FlagSet that prints nothing: parseArgs reports its
// errors and help.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseArgs parses args with fs, flags and arguments in any order (an
// argument "--" ends the flags), and returns the arguments. help is true
// when -h or --help was given; the command's help is then on w.
func parseArgs(c *command, fs *flag.FlagSet, args []string, w io.Writer) (pos []string, help bool, err error) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			writeCommandHelp(w, c)
			writeExitStatus(w)
			return nil, true, nil
		}
		if err != nil {
			return nil, false, usageError{cmd: c.name, err: err}
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), false, nil
		}
		if len(rest) == 0 {
			return pos, false, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// checkAddr checks a --redis value: host:port, with a port.
func checkAddr(cmd, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return usagef(cmd, "invalid --redis %q: want host:port", addr)
	}
	return nil
}

// checkPrefix checks a --prefix value as reentrant.WithPrefix would.
func checkPrefix(cmd, p string) error {
	if err := scripts.CheckPrefix(p); err != nil {
		return usagef(cmd, "invalid --prefix: %v", err)
	}
	return nil
}

const topDoc = `redfence demonstrates and inspects redfence locks: reentrant Redis locks
that hand out fencing tokens.`

// writeHelp prints the help of redfence and of every command.
func writeHelp(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nUsage:\n", topDoc)
	for _, c := range commands {
		fmt.Fprintf(w, "  redfence %s\n", c.synopsis)
	}
	fmt.Fprintf(w, "  redfence help [COMMAND]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s%s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-9s%s\n", "help", "print this help, or one command's")
	for _, c := range commands {
		fmt.Fprintln(w)
		writeCommandHelp(w, c)
	}
	writeExitStatus(w)
}

// writeCommandHelp prints c's usage, description and every flag of its
// FlagSet with its meaning and default.
func writeCommandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: redfence %s\n\n%s\n\nFlags (one dash or two; before or after arguments):\n", c.synopsis, c.doc)
	c.flags().VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		if arg != "" {
			arg = " " + arg
		}
		usage = strings.ReplaceAll(usage, "\n", "\n        ")
		fmt.Fprintf(w, "  --%s%s\n        %s", f.Name, arg, usage)
		if f.DefValue != "" {
			fmt.Fprintf(w, " (default %s)", quoteDefault(f))
		}
		fmt.Fprintln(w)
	})
	fmt.Fprintf(w, "  -h, --help\n        print this help to stdout and exit 0\n")
}

// quoteDefault quotes string defaults, as flag.PrintDefaults does.
func quoteDefault(f *flag.Flag) string {
	if g, ok := f.Value.(flag.Getter); ok {
		if _, isString := g.Get().(string); isString {
			return fmt.Sprintf("%q", f.DefValue)
		}
	}
	return f.DefValue
}

// writeExitStatus prints the exit statuses.
func writeExitStatus(w io.Writer) {
	fmt.Fprintf(w, "\nExit status:\n%s", exitStatusDoc)
}

const exitStatusDoc = `  0    success, and help
  1    runtime failure: Redis or a store unreachable or failing; unlock not
       confirmed, or the lock changed hands before it was forced
  2    usage error: unknown command or flag, bad flag value, missing or extra argument
  3    demo: the safety check failed (a stale write was accepted, or another
       outcome fencing rules out)
  130  interrupted (SIGINT)
`
