package testenv

import (
	"strings"
	"testing"
)

// RedisNoFunctions returns a client of a server without Functions and
// fails the test, naming the renames it wants, when the server it is
// given answers FUNCTION LIST: EachRedis's third run must never be the
// FCALL path again.
func TestRedisNoFunctionsRefusesAServerWithFunctions(t *testing.T) {
	withFunctions := RedisAddr(t)
	without := need(t, RedisNoFunctionsAddrVar, "real-Redis-without-Functions")

	f := &fakeTB{TB: t}
	f.run(func() { RedisNoFunctions(f) })
	if f.ended != "" {
		t.Fatalf("%s=%s: ended %q with %q, want a client", RedisNoFunctionsAddrVar, without, f.ended, f.msg)
	}

	t.Setenv(RedisNoFunctionsAddrVar, withFunctions)
	f = &fakeTB{TB: t}
	f.run(func() { RedisNoFunctions(f) })
	if want := "--rename-command FUNCTION"; f.ended != "fatal" || !strings.Contains(f.msg, want) {
		t.Errorf("%s=%s (a server with Functions): ended %q with %q, want a failure saying %q",
			RedisNoFunctionsAddrVar, withFunctions, f.ended, f.msg, want)
	}
}
