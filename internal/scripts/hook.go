package scripts

import (
	"github.com/redis/go-redis/v9"
)

// The module's tests reach the scripts here: their source as the server
// runs it, the script the wrappers run now, and a swap for a modified copy
// (see internal/testkit/mutant). To the module's users the scripts are fixed.

// Source returns the named script's source as install built it: the
// helpers it calls, then its own file, comments left out.
func Source(name string) string { return get(name).src }

// Script returns the named script as the wrappers run it now.
func Script(name string) *redis.Script { return *get(name).s }

// Swap makes the wrappers run src in place of the named script until
// restore is called. It is not safe while the script runs: swap before the
// test starts its clients' goroutines.
func Swap(name, src string) (restore func()) {
	s := get(name)
	old, oldSrc, oldHash, oldFn := *s.s, s.src, s.hash, s.fn
	*s.s, s.src = redis.NewScript(src), src
	s.hash = (*s.s).Hash()
	s.fn = "" // the library holds the original: the swapped script goes as EVALSHA
	return func() { *s.s, s.src, s.hash, s.fn = old, oldSrc, oldHash, oldFn }
}

func get(name string) *script {
	for i := range scripts {
		if scripts[i].name == name {
			return &scripts[i]
		}
	}
	panic("scripts: no script " + name)
}

// LibrarySource returns the Functions library as install built it:
// "#!lua name=<LibraryName()>" and its code.
func LibrarySource() string { return lib.src }

// Runs reports whether a command with args runs the named script: an
// EVALSHA or EVAL of it, or an FCALL of its function.
func Runs(name string, args []any) bool {
	if len(args) < 2 {
		return false
	}
	s := get(name)
	return args[1] == (*s.s).Hash() || args[1] == s.src || (s.fn != "" && args[1] == s.fn)
}

// Ran reports whether cmd, answered with err (a hook's, or cmd.Err()),
// ran the named script: Runs, and not refused for want of it (NOSCRIPT, a
// function not loaded, no Functions).
func Ran(name string, cmd redis.Cmder, err error) bool {
	if !Runs(name, cmd.Args()) {
		return false
	}
	if err == nil {
		err = cmd.Err()
	}
	return err == nil || !(redis.HasErrorPrefix(err, "NOSCRIPT") ||
		functionMissing(err) || noFunctions(err))
}
