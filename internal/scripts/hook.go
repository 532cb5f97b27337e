package scripts

import "github.com/redis/go-redis/v9"

// The module's tests reach the scripts here: their source as the server
// runs it, the script the wrappers run now, and a swap for a modified copy
// (see internal/mutant). To the module's users the scripts are fixed.

// Source returns the named script's source as Install built it: the
// helpers it calls, then its own file, comments left out.
func Source(name string) string { return get(name).src }

// Script returns the named script as the wrappers run it now.
func Script(name string) *redis.Script { return *get(name).s }

// Swap makes the wrappers run src in place of the named script until
// restore is called. It is not safe while the script runs: swap before the
// test starts its clients' goroutines.
func Swap(name, src string) (restore func()) {
	s := get(name)
	old, oldSrc, oldHash := *s.s, s.src, s.hash
	*s.s, s.src = redis.NewScript(src), src
	s.hash = (*s.s).Hash()
	return func() { *s.s, s.src, s.hash = old, oldSrc, oldHash }
}

func get(name string) *script {
	for i := range scripts {
		if scripts[i].name == name {
			if scripts[i].src == "" {
				panic("scripts: " + name + " is not installed (is package lua imported?)")
			}
			return &scripts[i]
		}
	}
	panic("scripts: no script " + name)
}
