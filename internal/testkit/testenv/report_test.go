package testenv

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeTB records how a helper ended a test instead of ending the real one,
// so these tests skip nothing themselves. Like a real test, it reports
// Skipped once Skipf ended it, unless it plays a fake that never does.
type fakeTB struct {
	testing.TB
	ended, msg   string
	neverSkipped bool
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.ended, f.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.ended, f.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Skipped() bool { return f.ended == "skip" && !f.neverSkipped }

// run calls fn on its own goroutine, so Goexit ends only fn.
func (f *fakeTB) run(fn func()) {
	var wg sync.WaitGroup
	wg.Go(fn)
	wg.Wait()
}

func TestMissingCountsEachSkipAgainstItsVariable(t *testing.T) {
	t.Setenv("CI", "")
	var c tally
	skip := func(name string, fake *fakeTB) {
		fake.TB = t
		fake.run(func() { c.missing(fake, name, "fail "+name, "skip "+name) })
		if fake.ended != "skip" || fake.msg != "skip "+name {
			t.Errorf("%s: ended %q with %q, want skip with %q", name, fake.ended, fake.msg, "skip "+name)
		}
	}
	skip(RedisAddrVar, &fakeTB{})
	skip(PostgresURLVar, &fakeTB{})
	skip(RedisAddrVar, &fakeTB{})
	skip("REDFENCE_REDIS_SERVER", &fakeTB{})
	skip(RedisAddrVar, &fakeTB{neverSkipped: true}) // a Skipf that skipped no test

	want := map[string]int{RedisAddrVar: 2, PostgresURLVar: 1, "REDFENCE_REDIS_SERVER": 1}
	got := c.counts()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("counts = %v, want %v", got, want)
	}
	const line = "example.com/p: 4 tests skipped: set REDFENCE_REDIS_ADDR (2), REDFENCE_POSTGRES_URL (1) and REDFENCE_REDIS_SERVER (1) to run them"
	if s := summary("example.com/p", got); s != line {
		t.Errorf("summary:\n got %s\nwant %s", s, line)
	}
}

// Under CI a missing variable fails the test and counts nothing.
func TestMissingFailsUnderCI(t *testing.T) {
	t.Setenv("CI", "true")
	var c tally
	f := &fakeTB{TB: t}
	f.run(func() { c.missing(f, RedisAddrVar, "fail it", "skip it") })
	if f.ended != "fatal" || f.msg != "fail it" {
		t.Errorf("ended %q with %q, want fatal with %q", f.ended, f.msg, "fail it")
	}
	if n := c.counts(); len(n) != 0 {
		t.Errorf("counts = %v, want none", n)
	}
}

// The helpers skip through the package's tally, saying which variable to
// set; a variable that is set is returned and skips nothing.
func TestHelpersSayWhichVariable(t *testing.T) {
	t.Setenv("CI", "")
	saved := skips.counts()
	t.Cleanup(func() { // the fakes' skips are no skips of this binary
		skips.mu.Lock()
		defer skips.mu.Unlock()
		skips.n = saved
	})
	for name, helper := range map[string]func(testing.TB) string{
		RedisAddrVar:   RedisAddr,
		PostgresURLVar: PostgresURL,
	} {
		before := skips.counts()[name]
		t.Setenv(name, "")
		f := &fakeTB{TB: t}
		f.run(func() { helper(f) })
		if want := "set " + name + " to run it"; f.ended != "skip" || !strings.Contains(f.msg, want) {
			t.Errorf("%s unset: ended %q with %q, want a skip saying %q", name, f.ended, f.msg, want)
		}
		if got := skips.counts()[name]; got != before+1 {
			t.Errorf("%s unset: the package's count went from %d to %d, want %d", name, before, got, before+1)
		}

		t.Setenv(name, "value")
		f = &fakeTB{TB: t}
		var v string
		f.run(func() { v = helper(f) })
		if f.ended != "" || v != "value" {
			t.Errorf("%s set: ended %q, returned %q, want %q", name, f.ended, v, "value")
		}
	}
}

func TestSummary(t *testing.T) {
	const pkg = "github.com/redfence/redfence/reentrant"
	for _, c := range []struct {
		counts map[string]int
		want   string
	}{
		{nil, ""},
		{map[string]int{RedisAddrVar: 0}, ""},
		{map[string]int{RedisAddrVar: 1}, pkg + ": 1 test skipped: set REDFENCE_REDIS_ADDR to run it"},
		{map[string]int{PostgresURLVar: 7}, pkg + ": 7 tests skipped: set REDFENCE_POSTGRES_URL to run them"},
		{
			map[string]int{PostgresURLVar: 2, RedisAddrVar: 12},
			pkg + ": 14 tests skipped: set REDFENCE_REDIS_ADDR (12) and REDFENCE_POSTGRES_URL (2) to run them",
		},
		{ // equal counts: by name
			map[string]int{RedisAddrVar: 1, PostgresURLVar: 1, "REDFENCE_REDIS_SERVER": 0},
			pkg + ": 2 tests skipped: set REDFENCE_POSTGRES_URL (1) and REDFENCE_REDIS_ADDR (1) to run them",
		},
	} {
		if got := summary(pkg, c.counts); got != c.want {
			t.Errorf("summary(%v):\n got %q\nwant %q", c.counts, got, c.want)
		}
	}
	if got, want := summary("", map[string]int{RedisAddrVar: 2}), "2 tests skipped: set REDFENCE_REDIS_ADDR to run them"; got != want {
		t.Errorf("no package: got %q, want %q", got, want)
	}
}

// The terminal gets the line only when go test would hide standard output.
func TestToTerminal(t *testing.T) {
	for _, c := range []struct {
		code            int
		verbose, direct bool
		want            bool
	}{
		{0, false, false, true}, // bare go test ./..., passing
		{1, false, false, false},
		{0, true, false, false},
		{0, false, true, false},
	} {
		if got := toTerminal(c.code, c.verbose, c.direct); got != c.want {
			t.Errorf("toTerminal(%d, verbose %v, direct %v) = %v, want %v", c.code, c.verbose, c.direct, got, c.want)
		}
	}
}

// Run passes the tests' exit code through.
func TestRunReturnsTheCode(t *testing.T) {
	for _, code := range []int{0, 1, 2} {
		if got := Wrap(runFunc(func() int { return code })).Run(); got != code {
			t.Errorf("Run = %d, want %d", got, code)
		}
	}
}
