// Package scripthook is the way in for the module's own tests to the lock
// scripts that package lua keeps unexported: their source as the server
// runs it, the script lua runs now, and a swap for a modified copy (see
// internal/mutant). Package lua registers its scripts here when it is
// initialised, so a user of this package imports lua too. Being internal,
// it is out of reach of the module's users: to them the scripts are fixed.
package scripthook

import "github.com/redis/go-redis/v9"

type script struct {
	src string
	cur **redis.Script // lua's variable, which its wrappers run
}

var scripts = map[string]script{}

// Register makes the script in *cur, whose source is src, reachable as
// name. Package lua calls it from init, once per script.
func Register(name, src string, cur **redis.Script) { scripts[name] = script{src, cur} }

// Source returns the named script's source as lua built it, its helpers
// (lib.lua, queue.lua) included.
func Source(name string) string { return get(name).src }

// Script returns the named script as lua runs it now.
func Script(name string) *redis.Script { return *get(name).cur }

// Swap makes lua run src in place of the named script until restore is
// called. It is not safe while the script runs: swap before the test starts
// its clients' goroutines.
func Swap(name, src string) (restore func()) {
	s := get(name)
	old := *s.cur
	*s.cur = redis.NewScript(src)
	return func() { *s.cur = old }
}

func get(name string) script {
	s, ok := scripts[name]
	if !ok {
		panic("scripthook: no script " + name + " is registered (is package lua imported?)")
	}
	return s
}
