package lua_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

func TestRepeatedRequestsApplyOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		run := func(level string) scripts.Acquired {
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: time.Minute, Level: level})
			require.NoError(t, err)
			assertLeaseShape(t, rdb, k)
			return a
		}
		first := run("r1")
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 1}, first)
		require.Equal(t, first, run("r1"), "a repeated fresh acquire must not take a new token")
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 2}, run("r2"))
		require.Equal(t, scripts.Acquired{OK: true, Token: 1, Depth: 2}, run("r2"), "a repeated reentry must not count twice")

		rel := func(level string) int64 {
			n, err := scripts.Release(ctx, rdb, k, "o1", first.Token, level, scripts.Tokens{})
			require.NoError(t, err)
			return n
		}
		require.EqualValues(t, 1, rel("r2"))
		require.EqualValues(t, 1, rel("r2"), "a repeated partial release must not count twice")
		require.EqualValues(t, 0, rel("r1"))
		require.EqualValues(t, 0, rel("r1"), "a repeated full release must still report success")
		require.EqualValues(t, 0, rel("r5"), "the release of an ownership that ended by release is taken for a repeat")
		n, err := scripts.Release(ctx, rdb, k, "o1", first.Token+1, "r5", scripts.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, -1, n, "a token never issued is not held")

		// Someone else takes the lock; the old full release, repeated, must
		// still answer as before and must not touch the new holder.
		other, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "r6"})
		require.NoError(t, err)
		require.Equal(t, fence.Token(2), other.Token)
		require.EqualValues(t, 0, rel("r1"))
		// ...even after that other owner fully released in turn: an
		// ownership that ended by release answers its releases as done.
		n, err = scripts.Release(ctx, rdb, k, "o2", other.Token, "r6", scripts.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
		require.EqualValues(t, 0, rel("r1"), "a retried release must not be told 'not held' after another owner's release")
		other, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "r6b"})
		require.NoError(t, err)
		st, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
		require.NoError(t, err)
		require.Equal(t, "o2", st.Owner)
		require.EqualValues(t, 1, st.Depth)
		require.Equal(t, []string{"r6b"}, st.Levels)
	})
}

// An ownership whose lease ran out is recorded as expired by the next
// script that writes, so a late or retried release of it is told "not
// held", on every path: the expired owner's own release, and another
// owner's acquire.
func TestReleaseAfterExpiryIsNotHeld(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		expire := func() { b.Expire(60 * time.Millisecond) }
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: 50 * time.Millisecond, Level: "r1"})
		require.NoError(t, err)
		expire()
		n, err := scripts.Release(ctx, rdb, k, "o1", a.Token, "r1", scripts.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, -1, n, "the lease ran out before the release")
		b2, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "r2"})
		require.NoError(t, err)
		require.True(t, b2.OK)
		n, err = scripts.Release(ctx, rdb, k, "o1", a.Token, "r1", scripts.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, -1, n, "a retry, after another ownership began")
		st, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
		require.NoError(t, err)
		require.Equal(t, []scripts.Ended{{Token: a.Token, Owner: "o1", Expired: true}}, st.Ended)

		// Expired without a release: another owner's acquire records it.
		k = keys(t)
		a, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: 50 * time.Millisecond, Level: "r1"})
		require.NoError(t, err)
		expire()
		b2, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "r2"})
		require.NoError(t, err)
		require.Equal(t, a.Token+1, b2.Token)
		n, err = scripts.Release(ctx, rdb, k, "o1", a.Token, "r1", scripts.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, -1, n)
		n, err = scripts.Release(ctx, rdb, k, "o2", b2.Token, "r2", scripts.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
		st, err = scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
		require.NoError(t, err)
		require.Equal(t, []scripts.Ended{{Token: a.Token, Owner: "o1", Expired: true}, {Token: b2.Token, Owner: "o2"}}, st.Ended)
	})
}

// At most 16 expired ownerships are recorded, the most recent ones; a
// release of an older one is still told "not held".
func TestExpiredRecordsBounded(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		for i := range 20 {
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: fmt.Sprint("r", i)})
			require.NoError(t, err)
			require.True(t, a.OK)
			require.NoError(t, rdb.HSet(ctx, k.Lock, "x", "1").Err()) // its lease ran out long ago
		}
		st, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
		require.NoError(t, err)
		require.Len(t, st.Ended, 17, "16 recorded and the last, not yet")
		require.EqualValues(t, 4, st.Ended[0].Token)
		require.Len(t, rdb.HKeys(ctx, k.Lock).Val(), 16+6, "16 records, w, t, b, o, x and one level")
		for tok := range fence.Token(20) {
			n, err := scripts.Release(ctx, rdb, k, "o", tok+1, fmt.Sprint("r", tok), scripts.Tokens{})
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "token %d expired", tok+1)
		}
	})
}

// The bug this layout fixes: an inner release (depth 2 to 1) whose reply
// is lost is retried by go-redis after the same owner reentered (depth 2
// again). The old script remembered only the last request, so the retry
// applied twice and freed a lock one level still relied on. Each level is
// now removed by its own ID, exactly once.
func TestRetriedPartialReleaseAfterReentryAppliesOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		outer, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "outer"})
		require.NoError(t, err)
		_, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "inner"})
		require.NoError(t, err)
		rel := func(level string) int64 {
			n, err := scripts.Release(ctx, rdb, k, "o", outer.Token, level, scripts.Tokens{})
			require.NoError(t, err)
			return n
		}
		require.EqualValues(t, 1, rel("inner"))
		again, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "inner2"})
		require.NoError(t, err)
		require.EqualValues(t, 2, again.Depth)
		require.EqualValues(t, 2, rel("inner"), "the retry of a release already applied changes nothing")
		replayed, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "inner2"})
		require.NoError(t, err)
		require.Equal(t, again, replayed, "a repeated reentry answers the depth it was granted, not today's")
		busy, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "other", TTL: time.Minute, Level: "x"})
		require.NoError(t, err)
		require.False(t, busy.OK, "the lock is still held at depth 2")
		require.EqualValues(t, 1, rel("inner2"))
		require.EqualValues(t, 0, rel("outer"))
	})
}

func TestAbandonUndoesOnlyThatRequest(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		_, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "a1"})
		require.NoError(t, err)
		undone, err := scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: "o", Level: "a1"})
		require.NoError(t, err)
		require.True(t, undone)
		st, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
		require.NoError(t, err)
		require.Empty(t, st.Owner, "an abandoned fresh acquisition frees the lock")

		_, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "a2"})
		require.NoError(t, err)
		_, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "a3"})
		require.NoError(t, err)
		for _, c := range []struct{ owner, req string }{{"x", "a3"}, {"o", "nope"}} {
			undone, err = scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: c.owner, Level: c.req})
			require.NoError(t, err)
			require.False(t, undone, "%v: not a level of this owner", c)
		}
		undone, err = scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: "o", Level: "a3"})
		require.NoError(t, err)
		require.True(t, undone)
		undone, err = scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: "o", Level: "a3"})
		require.NoError(t, err)
		require.False(t, undone, "a repeated abandon must not undo twice")
		_, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Minute, Level: "a4"})
		require.NoError(t, err)
		undone, err = scripts.Abandon(ctx, rdb, k, &scripts.Request{Owner: "o", Level: "a2"})
		require.NoError(t, err)
		require.True(t, undone, "a level is undone by its ID even after later reentries")
		st, err = scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Depth)
		require.EqualValues(t, 2, st.LastToken, "the counter is never rolled back")
	})
}

// Extending, reentering or renewing never shortens the lock: one level's
// short Extend must not cut the lease another level relies on.
func TestExtendNeverShortens(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Hour, Level: "outer"})
		require.NoError(t, err)
		ok, err := scripts.Extend(ctx, rdb, k, "o", a.Token, time.Second, scripts.Tokens{})
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, leaseLeft(t, rdb, k), 59*time.Minute, "a shorter extend must not shorten")
		_, err = scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o", TTL: time.Second, Level: "inner"})
		require.NoError(t, err)
		require.Greater(t, leaseLeft(t, rdb, k), 59*time.Minute, "a reentry with a shorter TTL must not shorten")
		ok, err = scripts.Extend(ctx, rdb, k, "o", a.Token, 2*time.Hour, scripts.Tokens{})
		require.NoError(t, err)
		require.True(t, ok)
		require.Greater(t, leaseLeft(t, rdb, k), 119*time.Minute, "a longer extend lengthens")
	})
}

func TestOwnerAndTokenChecked(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o1", TTL: time.Minute, Level: "a1"})
		require.NoError(t, err)

		// A second owner is refused and told the holder's remaining TTL.
		busy, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "o2", TTL: time.Minute, Level: "a2"})
		require.NoError(t, err)
		require.False(t, busy.OK)
		require.Greater(t, busy.HolderTTL, 50*time.Second)

		for _, c := range []struct {
			owner string
			tok   fence.Token
		}{{"o2", a.Token}, {"o1", a.Token + 1}, {"o1", a.Token - 1}} {
			ok, err := scripts.Extend(ctx, rdb, k, c.owner, c.tok, time.Hour, scripts.Tokens{})
			require.NoError(t, err)
			require.False(t, ok, "extend by %v", c)
			n, err := scripts.Release(ctx, rdb, k, c.owner, c.tok, "x"+c.owner+c.tok.String(), scripts.Tokens{})
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "release by %v", c)
		}
		ok, err := scripts.Extend(ctx, rdb, k, "o1", a.Token, time.Hour, scripts.Tokens{})
		require.NoError(t, err)
		require.True(t, ok)
		assertLeaseShape(t, rdb, k)
		require.Greater(t, leaseLeft(t, rdb, k), 59*time.Minute)
	})
}

// A strict lock released with nothing else to remember is compacted: its
// hash goes and the counter holds "<last token> <first token> <owner>".
// Everything the hash answered is answered the same from the record:
// inspect's last ownership, a retried release (even after other
// ownerships came and went: the incarnation goes on), a release by the
// wrong owner or of a token never issued, and the next token.
func TestCleanReleaseCompactsTheLock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		acquire := func(owner, level string) fence.Token {
			t.Helper()
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: owner, TTL: time.Minute, Level: level})
			require.NoError(t, err)
			require.True(t, a.OK)
			return a.Token
		}
		release := func(owner string, tok fence.Token, level string) int64 {
			t.Helper()
			n, err := scripts.Release(ctx, rdb, k, owner, tok, level, scripts.Tokens{})
			require.NoError(t, err)
			return n
		}
		first := acquire("o1", "r1")
		require.Zero(t, release("o1", first, "r1"))
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "a clean release leaves no hash")
		require.Equal(t, "1 1 o1", rdb.Get(ctx, k.Counter).Val())
		st, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{})
		require.NoError(t, err)
		st.Floor = 0 // the slot's, which other tests' names of the slot may have raised
		require.Equal(t, scripts.State{Name: k.Name, LastToken: first, LastOwner: "o1",
			Ended: []scripts.Ended{{Token: first, Owner: "o1"}}}, st, "inspect reads the record as the hash it replaced")

		require.Zero(t, release("o1", first, "r1"), "a retried release is answered released")
		require.EqualValues(t, -1, release("o2", first, "r1"), "by its own owner only")
		require.EqualValues(t, -1, release("o1", first+1, "r1"), "a token never issued is not held")

		second := acquire("o2", "r2")
		require.Equal(t, first+1, second)
		require.Equal(t, "1", lockField(t, rdb, k.Lock, "b"), "the next ownership continues the incarnation")
		require.Zero(t, release("o1", first, "r1"), "a retry of the earlier release, while another holds the lock")
		require.Zero(t, release("o2", second, "r2"))
		require.Equal(t, "2 1 o2", rdb.Get(ctx, k.Counter).Val())
		require.Zero(t, release("o1", first, "r1"), "and after that one was released too (the fault run's race)")

		// Deleting the record would reset the counter, as deleting the
		// counter always did: what stays is what an operator's DEL of the
		// lock key may remove.
		require.Zero(t, rdb.Del(ctx, k.Lock).Val(), "the lock key an operator deletes is already gone")
		require.Equal(t, second+1, acquire("o3", "r3"))
	})
}

// Nothing is compacted that a later answer needs: an ownership that
// expired (its e: record), a forced unlock (f), a handoff to a waiter,
// time tokens (the keys expire), a counter someone set above the lock's
// last token (put back as it was).
func TestCompactionKeepsWhatItCannotRecord(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		take := func(k scripts.Keys, owner, level string, ttl time.Duration, m scripts.Tokens) scripts.Acquired {
			t.Helper()
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: owner, TTL: ttl, Level: level, Tokens: m})
			require.NoError(t, err)
			require.True(t, a.OK)
			return a
		}

		k := keys(t) // expired, then another ownership released cleanly
		take(k, "o1", "r1", 50*time.Millisecond, scripts.Tokens{})
		b.Expire(60 * time.Millisecond)
		a := take(k, "o2", "r2", time.Minute, scripts.Tokens{})
		n, err := scripts.Release(ctx, rdb, k, "o2", a.Token, "r2", scripts.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
		require.Contains(t, rdb.HKeys(ctx, k.Lock).Val(), "e:1", "an expiry record keeps the hash")

		k = keys(t) // forced
		a = take(k, "o1", "r1", time.Minute, scripts.Tokens{})
		_, err = scripts.Force(ctx, rdb, k, a.Token, "ops", scripts.Tokens{})
		require.NoError(t, err)
		require.Contains(t, rdb.HKeys(ctx, k.Lock).Val(), "f", "a forced unlock keeps the hash")

		k = keys(t) // time tokens
		a = take(k, "o1", "r1", time.Minute, timeTokens)
		n, err = scripts.Release(ctx, rdb, k, "o1", a.Token, "r1", timeTokens)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "a time-mode hash is stowed")
		rk := k.Records(timeTokens)
		require.EqualValues(t, 1, rdb.Exists(ctx, rk[0], rk[1]).Val(), "into one record hash")

		k = keys(t) // time tokens, an expiry record in the hash
		first := take(k, "o1", "r1", 50*time.Millisecond, timeTokens)
		b.Expire(60 * time.Millisecond)
		a = take(k, "o2", "r2", time.Minute, timeTokens)
		n, err = scripts.Release(ctx, rdb, k, "o2", a.Token, "r2", timeTokens)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Contains(t, rdb.HKeys(ctx, k.Lock).Val(), fmt.Sprint("e:", first.Token), "an expiry record keeps a time-mode hash too")

		k = keys(t) // a counter set by hand above the last token
		a = take(k, "o1", "r1", time.Minute, scripts.Tokens{})
		require.NoError(t, rdb.Set(ctx, k.Counter, "100", 0).Err())
		n, err = scripts.Release(ctx, rdb, k, "o1", a.Token, "r1", scripts.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, "100", rdb.Get(ctx, k.Counter).Val(), "a higher counter is put back")
		require.EqualValues(t, 1, rdb.Exists(ctx, k.Lock).Val(), "and the hash kept")
		require.EqualValues(t, 101, take(k, "o2", "r2", time.Minute, scripts.Tokens{}).Token)

		k = keys(t) // a b set by hand above the last token
		a = take(k, "o1", "r1", time.Minute, scripts.Tokens{})
		require.NoError(t, rdb.HSet(ctx, k.Lock, "b", "5").Err())
		n, err = scripts.Release(ctx, rdb, k, "o1", a.Token, "r1", scripts.Tokens{})
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, "1", rdb.Get(ctx, k.Counter).Val(), "no record that would read as foreign")
		require.EqualValues(t, 2, take(k, "o2", "r2", time.Minute, scripts.Tokens{}).Token)
	})
}

// With time tokens a clean release stows the lock: its hash goes and its
// record joins a shared record hash. A take of the name continues the
// record's incarnation and marks it taken, so a release retried after any
// number of other owners took and released the lock is still answered as
// the first; an ownership whose hash an operator deleted breaks the chain,
// so its release is answered "not held".
func TestStowedRecordsAnswerRetries(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		take := func(k scripts.Keys, owner, level string) scripts.Acquired {
			t.Helper()
			a, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: owner, TTL: time.Minute, Level: level, Tokens: timeTokens})
			require.NoError(t, err)
			require.True(t, a.OK)
			return a
		}
		release := func(k scripts.Keys, owner string, a scripts.Acquired, level string) int64 {
			t.Helper()
			n, err := scripts.Release(ctx, rdb, k, owner, a.Token, level, timeTokens)
			require.NoError(t, err)
			return n
		}

		k := keys(t)
		a := take(k, "oA", "lA")
		require.Zero(t, release(k, "oA", a, "lA"))
		require.Zero(t, rdb.Exists(ctx, k.Lock).Val(), "stowed")
		bb := take(k, "oB", "lB")
		require.Equal(t, fmt.Sprint(a.Token), lockField(t, rdb, k.Lock, "b"), "B's take continues A's incarnation")
		require.Zero(t, release(k, "oA", a, "lA"), "A's retry while B holds: released")
		require.Zero(t, release(k, "oB", bb, "lB"))
		for i := range 5 { // more owners, each taking and releasing
			c := take(k, fmt.Sprint("o", i), "l")
			require.Zero(t, release(k, fmt.Sprint("o", i), c, "l"))
		}
		require.Zero(t, release(k, "oA", a, "lA"), "A's retry after six more ownerships: still released")
		require.Zero(t, release(k, "oB", bb, "lB"), "B's retry: released")
		last, err := scripts.Inspect(ctx, rdb, k, timeTokens)
		require.NoError(t, err)
		require.Equal(t, "o4", last.LastOwner, "Inspect reads the record")
		other, err := scripts.Inspect(ctx, rdb, k, scripts.Tokens{Time: true, Idle: time.Hour, Record: time.Minute})
		require.NoError(t, err)
		require.Empty(t, other.LastOwner, "nor the records of another record time")
		require.EqualValues(t, -1, release(k, "oX", scripts.Acquired{Token: last.LastToken}, "l"), "the last ownership's token with another owner: not held")

		k = keys(t) // an operator deletes a held lock's hash
		a = take(k, "oA", "lA")
		require.Zero(t, release(k, "oA", a, "lA"))
		c := take(k, "oC", "lC")
		require.NoError(t, rdb.Del(ctx, k.Lock).Err())
		bb = take(k, "oB", "lB")
		require.Equal(t, fmt.Sprint(bb.Token), lockField(t, rdb, k.Lock, "b"), "a deleted incarnation is not continued")
		require.Zero(t, release(k, "oB", bb, "lB"))
		require.EqualValues(t, -1, release(k, "oC", c, "lC"), "C's hold was deleted: not held")

		k = keys(t) // clients with another record time keep their records apart
		a = take(k, "oA", "lA")
		require.Zero(t, release(k, "oA", a, "lA"))
		minute := scripts.Tokens{Time: true, Idle: time.Hour, Record: time.Minute}
		ob, err := scripts.Acquire(ctx, rdb, k, &scripts.Request{Owner: "oB", TTL: time.Minute, Level: "lB", Tokens: minute})
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(ob.Token), lockField(t, rdb, k.Lock, "b"), "a take with another record time reads only its own record hashes")
		left, err := scripts.Release(ctx, rdb, k, "oB", ob.Token, "lB", minute)
		require.NoError(t, err)
		require.Zero(t, left)
		for _, m := range []scripts.Tokens{timeTokens, minute} {
			rk := k.Records(m)
			ttl := max(rdb.PTTL(ctx, rk[0]).Val(), rdb.PTTL(ctx, rk[1]).Val())
			require.Positive(t, ttl)
			require.LessOrEqual(t, ttl, 2*time.Duration(m.RecordMillis())*time.Millisecond, "each pair expires by its own record time")
		}
		require.Zero(t, release(k, "oA", a, "lA"), "A's retry, answered from its own records")

		k = keys(t) // a record the library would not write is not continued, nor marked
		rk := k.Records(timeTokens)
		for _, v := range []string{"5/9 x", "5 ", "5/3 "} {
			require.NoError(t, rdb.Del(ctx, rk[0], rk[1]).Err())
			require.NoError(t, rdb.HSet(ctx, rk[0], k.RecordField(), v).Err())
			require.NoError(t, rdb.HSet(ctx, rk[1], k.RecordField(), v).Err())
			a = take(k, "oA", "lA")
			require.Equal(t, fmt.Sprint(a.Token), lockField(t, rdb, k.Lock, "b"), "%q: a new incarnation", v)
			require.Equal(t, v, rdb.HGet(ctx, rk[0], k.RecordField()).Val(), "%q: left as it was", v)
			require.Equal(t, v, rdb.HGet(ctx, rk[1], k.RecordField()).Val(), "%q: left as it was", v)
			require.NoError(t, rdb.Del(ctx, k.Lock).Err())
		}
		require.NoError(t, rdb.Del(ctx, rk[0], rk[1]).Err())

		k = keys(t) // a record hash holding foreign data is left alone
		rk = k.Records(timeTokens)
		require.NoError(t, rdb.Set(ctx, rk[0], "x", 0).Err())
		require.NoError(t, rdb.Set(ctx, rk[1], "x", 0).Err())
		a = take(k, "oA", "lA")
		require.Zero(t, release(k, "oA", a, "lA"))
		require.EqualValues(t, 1, rdb.Exists(ctx, k.Lock).Val(), "not stowed: the hash keeps the record")
		require.Equal(t, "x", rdb.Get(ctx, rk[0]).Val())
		require.Zero(t, release(k, "oA", a, "lA"), "and answers a retry")
		require.NoError(t, rdb.Del(ctx, rk[0], rk[1]).Err())
	})
}

// lockField reads one field of the lock key, a hash or a hold kept as a
// string ("" when absent).
func lockField(t *testing.T, rdb redis.Cmdable, key, field string) string {
	t.Helper()
	f, err := testenv.LockFields(context.Background(), rdb, key)
	require.NoError(t, err)
	return f[field]
}
