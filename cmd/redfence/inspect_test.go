package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// rawDuration matches a duration printed in nanoseconds, such as "-1ns".
var rawDuration = regexp.MustCompile(`(^|[^0-9A-Za-z.])-?[0-9]+ns\b`)

// inspectBoth runs inspect in both forms, checks that they agree and that
// the JSON round-trips, and returns the decoded JSON.
func inspectBoth(t *testing.T, addr, prefix, name string) lockView {
	t.Helper()
	args := []string{"inspect", name, "--redis", addr, "--prefix", prefix}
	code, text, errOut := cli(t, t.Context(), args...)
	require.Equal(t, exitOK, code, errOut)
	code, js, errOut := cli(t, t.Context(), append(args, "--json")...)
	require.Equal(t, exitOK, code, errOut)
	require.NotRegexp(t, rawDuration, text)
	require.NotRegexp(t, rawDuration, js)

	var v lockView
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), js)
	var again bytes.Buffer
	require.NoError(t, v.writeJSON(&again))
	require.Equal(t, js, again.String(), "JSON does not round-trip")
	require.NotNil(t, v.Levels, "levels must be [], not null")
	require.Equal(t, name, v.Name)
	require.Equal(t, prefix, v.Prefix)

	// The text has the same fields; the lease may have shrunk in between.
	var want bytes.Buffer
	require.NoError(t, v.writeText(&want))
	ttlLine := regexp.MustCompile(`(?m)^ttl +.*$`)
	require.Equal(t, ttlLine.ReplaceAllString(want.String(), "ttl"), ttlLine.ReplaceAllString(text, "ttl"))
	return v
}

// inspect reports a never-used name, a held lock (reentered, with a
// waiter), a released one and an expired one, on miniredis and on the real
// Redis when REDFENCE_REDIS_ADDR is set.
func TestInspect(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		addr := b.Client.Options().Addr
		prefix := "cli-test"
		name := testenv.Unique(t)
		locks, err := reentrant.New(b.Client, reentrant.WithPrefix(prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = locks.Close() })

		v := inspectBoth(t, addr, prefix, name)
		require.Equal(t, lockView{Name: name, Prefix: prefix, Lease: leaseNone, TTL: "none",
			Levels: []string{}}, v)
		code, text, _ := cli(t, t.Context(), "inspect", "--prefix", prefix, "--redis", addr, name)
		require.Equal(t, exitOK, code)
		require.Equal(t, name+": no state under prefix cli-test (never locked there)\n", text, "one line")

		outer, err := locks.Lock(t.Context(), name, reentrant.WithMetadata("worker-3 job 1842"))
		require.NoError(t, err)
		inner, err := locks.Lock(outer.Context(), name)
		require.NoError(t, err)
		// A second client waits for the lock until the test cancels it.
		others, err := reentrant.New(b.Client, reentrant.WithPrefix(prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = others.Close() })
		wctx, cancel := context.WithCancel(t.Context())
		waited := make(chan error, 1)
		go func() { _, err := others.Lock(wctx, name); waited <- err }()
		require.Eventually(t, func() bool {
			st, err := locks.Inspect(t.Context(), name)
			return err == nil && st.Waiters == 1
		}, time.Minute, 5*time.Millisecond)

		v = inspectBoth(t, addr, prefix, name)
		require.True(t, v.Held)
		require.Equal(t, string(outer.Owner()), v.Owner)
		require.Equal(t, int64(2), v.Depth)
		require.Equal(t, uint64(outer.Token()), v.Token)
		require.ElementsMatch(t, []string{outer.ID(), inner.ID()}, v.Levels)
		require.Equal(t, uint64(outer.Token()), v.LastToken)
		require.Equal(t, int64(1), v.Waiters)
		require.Equal(t, leaseActive, v.Lease)
		require.Positive(t, v.TTLMillis)
		require.LessOrEqual(t, v.TTLMillis, reentrant.DefaultTTL.Milliseconds())
		d, err := time.ParseDuration(v.TTL)
		require.NoError(t, err, "ttl %q is not a Go duration", v.TTL)
		require.Equal(t, time.Duration(v.TTLMillis)*time.Millisecond, d)
		_, text, _ = cli(t, t.Context(), "inspect", name, "--redis", addr, "--prefix", prefix)
		require.Regexp(t, `(?m)^ttl         [0-9.]+m?s$`, text)
		require.Regexp(t, `(?m)^levels      \S+ \S+$`, text)
		require.Contains(t, text, "waiters     1\n")
		require.Contains(t, text, "depth       2\n")
		require.Contains(t, text, "meta        worker-3 job 1842\n")
		require.Contains(t, text, "found       yes\n")
		require.Equal(t, "worker-3 job 1842", v.Meta)
		require.True(t, v.Found)

		// Under another prefix the held lock looks free, and inspect says
		// that nothing of it was found there; the exit status stays 0.
		v = inspectBoth(t, addr, scripts.DefaultPrefix, name)
		require.False(t, v.Held)
		require.False(t, v.Found)
		code, text, errOut := cli(t, t.Context(), "inspect", name, "--redis", addr)
		require.Equal(t, exitOK, code, errOut)
		require.Equal(t, name+": no state under prefix redfence (never locked there)\n", text)
		_, text, _ = cli(t, t.Context(), "inspect", name, "--redis", addr, "--json")
		require.Contains(t, text, `"found": false`)

		cancel()
		require.ErrorIs(t, <-waited, context.Canceled)
		require.NoError(t, inner.Unlock(t.Context()))
		require.NoError(t, outer.Unlock(t.Context()))
		v = inspectBoth(t, addr, prefix, name)
		require.False(t, v.Held)
		require.Equal(t, leaseNone, v.Lease)
		require.GreaterOrEqual(t, v.LastToken, uint64(outer.Token()), "the floor of the name's slot")
		require.True(t, v.Found, "the name's floor is state")
		require.Empty(t, v.Owner, "a released name keeps no owner")

		short, err := reentrant.New(b.Client, reentrant.WithPrefix(prefix), reentrant.WithTTL(50*time.Millisecond), reentrant.WithoutRenewal())
		require.NoError(t, err)
		t.Cleanup(func() { _ = short.Close() })
		l, err := short.Lock(t.Context(), name)
		require.NoError(t, err)
		b.Expire(100 * time.Millisecond)
		v = inspectBoth(t, addr, prefix, name)
		require.False(t, v.Held)
		require.Empty(t, v.Owner, "an expired hold leaves nothing")
		require.GreaterOrEqual(t, v.LastToken, uint64(l.Token()))

		// Under the default prefix the lock does not exist.
		v = inspectBoth(t, addr, scripts.DefaultPrefix, name)
		require.Zero(t, v.LastToken)
		require.False(t, v.Found)
	})
}

// The lease is "none" when free and never prints as a raw or negative
// duration, whatever State.TTL holds.
func TestLease(t *testing.T) {
	for _, c := range []struct {
		st        reentrant.State
		kind, ttl string
		ms        int64
	}{
		{reentrant.State{}, leaseNone, "none", 0},
		{reentrant.State{TTL: -1}, leaseNone, "none", 0},
		{reentrant.State{Held: true, TTL: 12345 * time.Millisecond}, leaseActive, "12.345s", 12345},
		{reentrant.State{Held: true, TTL: 0}, leaseActive, "0s", 0},
		{reentrant.State{Held: true, TTL: -1}, leaseNoExpiry, "no expiry", 0},
		{reentrant.State{Held: true, TTL: -2 * time.Millisecond}, leaseNoExpiry, "no expiry", 0},
		{reentrant.State{Held: true, TTL: math.MaxInt64}, leaseActive, "2562047h47m16.854s", math.MaxInt64 / int64(time.Millisecond)},
	} {
		kind, ttl, ms := lease(c.st)
		require.Equal(t, []any{c.kind, c.ttl, c.ms}, []any{kind, ttl, ms}, "%+v", c.st)
		var text bytes.Buffer
		found := c.st
		found.LastToken = 1 // something under the prefix: the text has every field
		require.NoError(t, newLockView("p", found).writeText(&text))
		require.NotRegexp(t, rawDuration, text.String())
		require.Contains(t, text.String(), "ttl         "+c.ttl+"\n")
	}
}

// The help and the package documentation list every JSON field, and every
// text label is a JSON field's name.
func TestJSONFieldsDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	var names []string
	for _, typ := range []reflect.Type{reflect.TypeFor[lockView](), reflect.TypeFor[forcedView]()} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			require.NotEmpty(t, name, "%s.%s has no json name", typ, f.Name)
			require.Regexp(t, `^[a-z]+(_[a-z]+)*$`, name, "not snake_case")
			names = append(names, name)
		}
	}
	for _, name := range names {
		word := regexp.MustCompile(`\b` + name + `\b`)
		require.Regexp(t, word, inspectDoc, "inspect's help lacks JSON field %q", name)
		require.Regexp(t, word, string(doc), "doc.go lacks JSON field %q", name)
	}
	var text bytes.Buffer
	require.NoError(t, lockView{Found: true}.writeText(&text))
	for _, line := range strings.Split(strings.TrimSpace(text.String()), "\n") {
		label, _, _ := strings.Cut(line, " ")
		require.Contains(t, names, label)
	}
}
