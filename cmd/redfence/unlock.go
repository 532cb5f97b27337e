package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"unicode"

	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/reentrant"
)

const unlockDoc = `Forces the lock NAME open: ends its current ownership, whoever holds it, and
hands the lock to the next waiter (reentrant.Client.ForceUnlock). This is the
safe way out of a stuck lock. Never DEL a lock's keys or FLUSHDB a lock's
Redis instead: that can make tokens repeat (see docs/safety.md).

The fencing counter is untouched, so the next holder gets a higher token and
every fenced store refuses the forced holder's late writes once the next
holder has written. The forced holder learns it at its next renewal (its
lease ends with ErrGone). Redis records who forced which token and when;
inspect shows it under "forced".

unlock shows the holder and asks for confirmation on a terminal; --yes skips
the question, and is required when stdin is not a terminal (/dev/null, a
pipe, a file: without --yes, a usage error, status 2). It ends only the
ownership it showed: if the lock changed hands meanwhile, nothing is forced
and the exit status is 1, as when the question is not answered yes. A free
lock is left alone (status 0). --force is required: unlock has no other
mode.`

type unlockConfig struct {
	target
	force bool
	yes   bool
}

func unlockFlags(cfg *unlockConfig) *flag.FlagSet {
	fs := newFlagSet("unlock")
	cfg.flags(fs, "the Redis server at `host:port` (required)")
	fs.BoolVar(&cfg.force, "force", false, "end the current ownership, whoever holds it (required)")
	fs.BoolVar(&cfg.yes, "yes", false, "do not ask for confirmation")
	return fs
}

// The terminal unlock asks on; tests replace them.
var (
	stdin           io.Reader = os.Stdin
	stdinIsTerminal           = func() bool { return isTerminal(os.Stdin) }
)

// errNotConfirmed reports an unlock the operator did not confirm.
var errNotConfirmed = errors.New("not confirmed: nothing was changed")

// unlock runs the unlock command.
func unlock(ctx context.Context, c *command, args []string, stdout io.Writer) error {
	var cfg unlockConfig
	pos, help, err := parseArgs(c, unlockFlags(&cfg), args, stdout)
	switch {
	case help || err != nil:
		return err
	case !cfg.force:
		return usagef(c.name, "unlock needs --force: it ends another process's ownership of the lock")
	case !cfg.yes && !stdinIsTerminal():
		return usagef(c.name, "stdin is not a terminal: give --yes to force the lock without confirmation")
	}
	locks, st, closeLocks, err := cfg.inspect(ctx, c, pos, tuning.Identity(operator()).(reentrant.ClientOption))
	if err != nil {
		return err
	}
	defer closeLocks()
	name := st.Name
	if st.Token == 0 {
		fmt.Fprintf(stdout, "lock %q is free: nothing to force\n", name)
		if !found(st) {
			fmt.Fprintf(stdout, "%s\n", notFound(cfg.prefix))
		}
		return nil
	}
	fmt.Fprintf(stdout, "lock %q is held by %s with token %d (depth %d, lease %s, metadata %s, %d waiting)\n",
		name, textString(st.Owner), st.Token, st.Depth, st.TTL.Truncate(1e6), textString(st.Meta), st.Waiters)
	if !cfg.yes {
		fmt.Fprintf(stdout, "Force it open? Writes with token %d will be refused once the next holder writes. [y/N] ", st.Token)
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(stdout)
			return errNotConfirmed
		}
	}
	if _, err := locks.ForceUnlock(ctx, name, st.Token); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "forced: the ownership with token %d ended; the lock went to the next waiter, if any\n", st.Token)
	return nil
}

// operator names who runs the command, for the record Redis keeps.
func operator() string {
	who := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	host, _ := os.Hostname()
	id := "redfence unlock by " + who + "@" + host
	if len(id) > tuning.IdentityMaxLen {
		id = id[:tuning.IdentityMaxLen]
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(id, "?"))
}
