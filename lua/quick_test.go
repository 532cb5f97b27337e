package lua_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// The quick paths (quick.lua's quickTake and quickRelease) must answer and
// write exactly what the general path would. TestQuickPathsMatchTheGeneralPath
// runs each script twice on the same generated state, as it ships and with
// its quick path cut out, and compares the replies and every key after.
// The states lean towards the ones the quick paths take (a compacted or
// absent lock for acquire; a live depth-1 ownership for release) and mix in
// every field, malformed values, other owners, tokens and levels, the
// other token mode and wrong key types, which the quick paths must leave
// to the general path.

// withoutQuick returns the named script's source with its quick path cut
// out (the general path then reads the hash itself), failing t if the text
// to cut is not there.
func withoutQuick(t *testing.T, name, quick string) string {
	src := scripts.Source(name)
	require.Contains(t, src, quick, "the %s script's quick path", name)
	return strings.Replace(src, quick, "local read\n", 1)
}

const (
	quickTakeCall = "local quick, read = quickTake(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[9])\n" +
		"if quick then\n  return quick\nend\n"
	quickReleaseCall = "local quick, read = quickRelease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])\n" +
		"if quick then\n  return quick\nend\n"
	quickExtendCall = "local quick, read = quickExtend(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])\n" +
		"if quick then\n  return quick\nend\n"
)

var (
	lineNumber = regexp.MustCompile(`:[0-9]+:`)
	scriptSite = regexp.MustCompile(`script: [0-9a-f]+, on @user_script:[0-9]+`)
)

// quickState is a generated state of a lock's three keys.
type quickState struct {
	counter string            // "" none, "#hash" a hash (wrong type)
	hash    map[string]string // nil none
	hashStr bool              // the lock key is a string (wrong type)
	holdStr bool              // the hash (o, t, x, b, l:r1) is kept as a string hold
	queue   []string          // members, scores in order
	qStr    bool              // the queue key is a string (wrong type)
}

// drawQuickState draws a state at server time now (ms); exact when TIME
// stands still (miniredis), so that leases may end within a millisecond
// of now.
func drawQuickState(t *rapid.T, now int64, exact bool, script string) quickState {
	var s quickState
	s.counter = rapid.SampledFrom([]string{"", "5", "6", "5 1 o1", "5 1 o1", "5 3 o2", "6 1 o1",
		"5 7 o1", "5 1 ", "5 01 o1", "abc", "0", "05", "#hash", "9007199254740991",
		"9007199254740990", "9007199254740991 1 o1", "12345678901234567 1 o1"}).Draw(t, "counter")
	kind := rapid.IntRange(0, 12).Draw(t, "hashKind")
	typical := rapid.Bool().Draw(t, "typical")
	if typical {
		// What the script's quick paths take, give or take a field: for
		// acquire, an absent hash (taken) or a live one (queued behind);
		// for release, a live depth-1 ownership (compacted, or handed on
		// to a waiter); for extend, the same ownership.
		kind = map[string]int{"acquire": 0, "release": 5, "extend": 5}[script]
		if script == "acquire" {
			// Free (absent), held, or the record of a released time-mode
			// ownership, which its hash keeps until it expires.
			kind = rapid.SampledFrom([]int{0, 5, 5, 13}).Draw(t, "typicalAcquire")
		}
	}
	switch kind {
	case 0, 1, 2, 3:
		// absent: what a compacted or new lock looks like
	case 13:
		// A time-mode record: o, t and b, left by a release; mostly the
		// floor at t (this name's), else a plain floor another name raised
		// or none, or one the quick path leaves to the general path.
		s.hash = map[string]string{"o": "o1", "t": "6", "b": rapid.SampledFrom([]string{"1", "6", "6", "7", "0"}).Draw(t, "recordB")}
		s.counter = rapid.SampledFrom([]string{"6", "6", "", "9", "5", "6 1 o1", "abc", "9007199254740991"}).Draw(t, "recordCounter")
	case 4:
		s.hashStr = true
	case 5, 6, 7:
		// A live ownership at depth 1, as take left it: what a release
		// compacts or hands on, and what a waiting acquire queues behind.
		lefts := []int64{60_000, 60_000, 60_000, -1_000}
		if exact {
			lefts = append(lefts, 1, 0, -1)
		}
		x := rapid.SampledFrom(lefts).Draw(t, "heldLeaseLeft")
		b := rapid.SampledFrom([]string{"1", "1", "1", "1", "6", "7", "0"}).Draw(t, "heldB")
		o := "o1"
		if script == "acquire" {
			// Mostly another owner's hold, which a waiting caller queues
			// behind; the caller is mostly o1.
			o = rapid.SampledFrom([]string{"o1", "o2", "o2"}).Draw(t, "heldOwner")
		}
		s.hash = map[string]string{"o": o, "t": "6", "x": strconv.FormatInt(now+x, 10), "b": b, "l:r1": "1"}
		if rapid.Bool().Draw(t, "meta") {
			s.hash["m"] = "meta"
		}
		// At most one field more, the level less or a malformed token
		// (none in a plain typical state): the quick paths leave most to the general path.
		extra := map[string][2]string{"q": {"q", "1"}, "q=x": {"q", "x"}, "y": {"y", "1"}, "e:4": {"e:4", "o3"},
			"w": {"w", "3"}, "f": {"f", "4 100 admin"}, "p": {"p", "1"}, "zz": {"zz", "junk"}, "l:r2": {"l:r2", "2"}}
		plain := typical && rapid.Bool().Draw(t, "plain")
		switch f := rapid.SampledFrom([]string{"-", "-", "-", "q", "q=x", "y", "e:4", "w", "f", "p", "zz", "l:r2", "no level", "bad t"}).Draw(t, "extra"); {
		case plain || f == "-":
		case f == "no level": // a lease without a level: foreign
			delete(s.hash, "l:r1")
		case f == "bad t": // not canonical: foreign
			s.hash["t"] = "06"
		default:
			s.hash[extra[f][0]] = extra[f][1]
		}
		if _, m := s.hash["m"]; len(s.hash) == 5 && s.hash["l:r1"] == "1" && !m {
			// The same hold kept as a string, as quickTake writes it with
			// time tokens (b above t, or 0, makes it foreign).
			s.holdStr = rapid.Bool().Draw(t, "holdStr")
		}
		// Mostly a plain counter (take left 6; none; lowered or raised by
		// hand, 7 at the handed token itself); else one the quick paths
		// leave to the general path, put back as it was.
		s.counter = rapid.SampledFrom([]string{"6", "6", "6", "6", "6", "", "5", "9", "7"}).Draw(t, "heldCounter")
		if rapid.IntRange(0, 3).Draw(t, "oddCounter") == 0 {
			s.counter = rapid.SampledFrom([]string{"6 1 o1", "9 1 o1", "abc", "0", "#hash", "9007199254740991"}).Draw(t, "heldOddCounter")
		}
	default:
		s.hash = map[string]string{}
		pick := func(field string, values ...string) {
			if v := rapid.SampledFrom(values).Draw(t, field); v != "-" {
				s.hash[field] = v
			}
		}
		future, past := strconv.FormatInt(now+60_000, 10), strconv.FormatInt(now-1_000, 10)
		pick("o", "o1", "o1", "o1", "o2", "-")
		pick("t", "6", "6", "6", "5", "x", "-")
		pick("x", future, future, future, past, "bad", "-")
		pick("b", "1", "1", "6", "9", "0", "-")
		pick("l:r1", "1", "1", "2", "z", "-", "-")
		pick("l:r2", "1", "2", "-", "-", "-", "-")
		for _, f := range []string{"m", "q", "y", "e:4", "w", "f", "p", "zz"} {
			v := map[string]string{"m": "meta", "q": "1", "y": "1", "e:4": "o3", "w": "3",
				"f": "4 100 admin", "p": "1", "zz": "junk"}[f]
			pick(f, v, "-", "-", "-", "-", "-")
		}
	}
	s.qStr = rapid.IntRange(0, 9).Draw(t, "queueKind") == 0
	members := []string{"w1\n1000\no4\n\np" + "chan1", "w2\n1000\no5\nmeta\np" + "chan2", "w3\n2000\no1\n\nschan3", "junk"}
	s.queue = rapid.SliceOfN(rapid.SampledFrom(members), 0, 2).Draw(t, "queue")
	if typical && script == "release" && s.hash != nil && rapid.Bool().Draw(t, "handOn") {
		// Someone waits: the release hands the lock on (to a well-formed
		// head; a malformed one, or a flag not 1, is refused).
		s.hash["q"] = rapid.SampledFrom([]string{"1", "1", "1", "1", "1", "x"}).Draw(t, "qFlag")
		s.queue = append([]string{rapid.SampledFrom(append(members[:3:3], members...)).Draw(t, "head")}, s.queue...)
		s.qStr = false
	}
	return s
}

func (s quickState) write(t *testing.T, rdb *redis.Client, keys []string) {
	ctx := context.Background()
	require.NoError(t, rdb.Del(ctx, keys...).Err())
	switch {
	case s.counter == "#hash":
		require.NoError(t, rdb.HSet(ctx, keys[2], "a", "b").Err())
	case s.counter != "":
		require.NoError(t, rdb.Set(ctx, keys[2], s.counter, 0).Err())
	}
	if s.hashStr {
		require.NoError(t, rdb.Set(ctx, keys[0], "foreign", 0).Err())
	} else if s.holdStr {
		h := s.hash
		require.NoError(t, rdb.Set(ctx, keys[0], h["t"]+" "+h["x"]+" "+h["b"]+" r1 "+h["o"], 0).Err())
	} else if len(s.hash) > 0 {
		require.NoError(t, rdb.HSet(ctx, keys[0], s.hash).Err())
	}
	if s.qStr {
		require.NoError(t, rdb.Set(ctx, keys[1], "foreign", 0).Err())
		return
	}
	for i, m := range s.queue {
		require.NoError(t, rdb.ZAdd(ctx, keys[1], redis.Z{Score: float64(i + 1), Member: m}).Err())
	}
}

// quickSnapshot returns the keys' contents, the lock hash's x (a time)
// as its distance from now (rounded to 10 s unless exact: TIME moves on a
// real Redis, by up to seconds between the two runs on a loaded machine;
// the leases drawn are 0 s, 10 s and 60 s, or 1 s past), the queue's
// members in order without their scores (TIME too), and whether each key
// has an expiry.
// floorExpiry is a snapshot line's expiry flag.
var floorExpiry = regexp.MustCompile(` expiry=(true|false)`)

func quickSnapshot(t *testing.T, rdb *redis.Client, keys []string, now int64, exact bool) string {
	ctx := context.Background()
	var b strings.Builder
	for i, k := range keys {
		if h, err := testenv.LockFields(ctx, rdb, k); i == 0 && err == nil && len(h) > 0 {
			// A hold kept as a string reads as its hash: the general path
			// writes the hash.
			var fields []string
			for f, v := range h {
				if x, err := strconv.ParseInt(v, 10, 64); f == "x" && err == nil && !exact {
					v = fmt.Sprintf("now%+d0s", (x-now+5000)/10000)
				}
				fields = append(fields, f+"="+v)
			}
			sort.Strings(fields)
			fmt.Fprintf(&b, "hash %v", fields)
		} else if q := rdb.ZRange(ctx, k, 0, -1); i == 1 && q.Err() == nil {
			fmt.Fprintf(&b, "queue %q", q.Val()) // the scores are TIME
		} else {
			b.WriteString(testenv.Snapshot(t, rdb, k))
		}
		fmt.Fprintf(&b, " expiry=%v\n", rdb.PTTL(ctx, k).Val() > 0)
	}
	return b.String()
}

// waiters listens on the generated waiters' channels on a real Redis:
// chan1 and chan2 by PUBLISH, chan3 by SPUBLISH. On miniredis it hears
// nothing: its messages may come after a later PONG, so they cannot be
// told apart by call (and it has no shard channels).
type waiters struct{ ps *redis.PubSub }

func listen(t *testing.T, rdb *redis.Client, real bool) waiters {
	if !real {
		return waiters{}
	}
	ctx := t.Context()
	ps := rdb.Subscribe(ctx, "chan1", "chan2")
	t.Cleanup(func() { _ = ps.Close() })
	require.NoError(t, ps.SSubscribe(ctx, "chan3"))
	w := waiters{ps}
	w.heard(t) // the subscriptions' confirmations
	return w
}

// heard returns the messages received since the last call, in order, each
// as "<channel> <payload>". A PING on the subscriber's connection fences
// them: Redis sends its PONG after every message published before it.
func (w waiters) heard(t *testing.T) []string {
	if w.ps == nil {
		return nil
	}
	ctx := t.Context()
	require.NoError(t, w.ps.Ping(ctx, "fence"))
	var got []string
	for {
		m, err := w.ps.ReceiveTimeout(ctx, 10*time.Second)
		require.NoError(t, err)
		switch m := m.(type) {
		case *redis.Message:
			got = append(got, m.Channel+" "+m.Payload)
		case *redis.Pong:
			if m.Payload == "fence" {
				return got
			}
		}
	}
}

// quickPaths are the quick paths: quickTake, quickQueue, quickRelease's
// compaction, quickHandOn and quickExtend.
var quickPaths = []string{"take", "queue", "compact", "handOn", "extend"}

// quickPath names the quick path a call of script that took one took on
// state st: the lock hash tells them apart.
func quickPath(script string, st quickState) string {
	switch {
	case script == "acquire" && len(st.hash) == 0:
		return "take"
	case script == "acquire":
		return "queue"
	case script == "extend":
		return "extend"
	case st.hash["q"] == "1":
		return "handOn"
	}
	return "compact"
}

func TestQuickPathsMatchTheGeneralPath(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		rdb, k := be.Client, keys(t)
		ks := []string{k.Lock, k.Queue, k.Counter}
		calls := map[string]string{"acquire": quickTakeCall, "release": quickReleaseCall, "extend": quickExtendCall}
		general, shipped, probe := map[string]*redis.Script{}, map[string]*redis.Script{}, map[string]*redis.Script{}
		for name, call := range calls {
			general[name] = redis.NewScript(withoutQuick(t, name, call))
			shipped[name] = redis.NewScript(scripts.Source(name))
			// probe answers "quick" when the quick path takes the call.
			probe[name] = redis.NewScript(strings.Replace(scripts.Source(name), call,
				strings.Replace(call, "return quick\n", "return 'quick'\n", 1)+"do return 'general' end\n", 1))
		}
		quickTaken := map[string]int{}
		sub := listen(t, rdb, be.Mini == nil)
		check := func(rt *rapid.T) {
			ctx := context.Background()
			now := rdb.Time(ctx).Val().UnixMilli()
			if be.Mini != nil {
				be.Mini.SetTime(time.UnixMilli(now)) // TIME stands still
			}
			name := rapid.SampledFrom([]string{"acquire", "release", "release", "extend"}).Draw(rt, "script")
			st := drawQuickState(rt, now, be.Mini != nil, name)
			owner := rapid.SampledFrom([]string{"o1", "o1", "o1", "o1", "o2"}).Draw(rt, "owner")
			level := rapid.SampledFrom([]string{"r1", "r1", "r1", "r1", "r1", "r1", "r2", "r3"}).Draw(rt, "level")
			modes := []string{"0", "0", "0", "0", "0", "0", "0", "0", "x"}
			if be.Mini != nil {
				// Time tokens are TIME in µs: equal only where TIME stands still.
				modes = append(modes, "5000", "5000/3000", "5000/3000", "7000/3000")
			}
			mode := rapid.SampledFrom(modes).Draw(rt, "mode")
			var args []any
			if name == "acquire" {
				member := rapid.SampledFrom([]string{"", "w1\n1000\no4\n\npchan1", "w1\n1000\no4\n\npchan1",
					"w3\n2000\no1\n\nschan3", "bad"}).Draw(rt, "member")
				meta := rapid.SampledFrom([]string{"", "", "meta2"}).Draw(rt, "meta")
				ttl := rapid.SampledFrom([]string{"10000", "10000", "0"}).Draw(rt, "ttl")
				args = []any{owner, ttl, level, member, "30000", mode, meta, "5"}
				if rapid.Bool().Draw(rt, "again") {
					args = append(args, "1") // an attempt after the call's first
				}
			} else {
				token := rapid.SampledFrom([]string{"6", "6", "6", "6", "6", "6", "6", "6", "5", "7", "x"}).Draw(rt, "token")
				args = []any{owner, token, level, mode}
				if name == "extend" {
					ttl := rapid.SampledFrom([]string{"90000", "90000", "90000", "100", "0", "x"}).Draw(rt, "ttl")
					args = []any{owner, token, ttl, mode}
				}
			}
			run := func(s *redis.Script) string {
				sub.heard(t) // what the probe of the last draw published
				st.write(t, rdb, ks)
				r, err := s.Run(ctx, rdb, ks, args...).Result()
				if a, ok := r.([]any); ok && len(a) == 3 && a[0] == int64(0) && be.Mini == nil {
					a[1] = fmt.Sprintf("%d0s", (a[1].(int64)+5000)/10000) // a lease left, in ms
				}
				// A script error names the line, which the cut moves, and
				// a Lua error also the script's SHA1.
				errText := lineNumber.ReplaceAllString(scriptSite.ReplaceAllString(fmt.Sprint(err), "script: S"), ":N:")
				snap := quickSnapshot(t, rdb, ks, now, be.Mini != nil)
				if err != nil && name == "acquire" && mode != "0" {
					// A time-mode take reads and raises the floor in one
					// SET … PX … GET; a floor it then refuses (foreign, or
					// at 2^53) is put back with the value it had but not
					// the expiry, which the command replaced (quickTake).
					lines := strings.SplitAfter(snap, "\n")
					lines[2] = floorExpiry.ReplaceAllString(lines[2], " expiry=?")
					snap = strings.Join(lines, "")
				}
				return fmt.Sprintf("reply=%v err=%v heard=%q\n%s", r, errText, sub.heard(t), snap)
			}
			want, got := run(general[name]), run(shipped[name])
			if want != got {
				rt.Fatalf("%s(%q) on %+v:\ngeneral path:\n%s\nshipped:\n%s", name, args, st, want, got)
			}
			st.write(t, rdb, ks)
			if probe[name].Run(ctx, rdb, ks, args...).Val() == "quick" {
				quickTaken[quickPath(name, st)]++
			}
		}
		// A release meets the states its quick paths take in a few % of
		// the draws: run batches until each path was taken 20 times.
		enough := func() bool {
			for _, p := range quickPaths {
				if quickTaken[p] < 20 {
					return false
				}
			}
			return true
		}
		for i := 0; i < 40 && !enough(); i++ {
			rapid.Check(t, check)
		}
		// The generator must reach the states the quick paths take, or the
		// comparison says nothing about them.
		for _, p := range quickPaths {
			require.GreaterOrEqual(t, quickTaken[p], 20, "the quick path %s took too few generated calls", p)
		}
		t.Logf("the quick paths took %v of the calls", quickTaken)
	})
}
