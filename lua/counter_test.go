package lua_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/lua"
)

// An operator's DEL of the lock hash (what unsticks a Redis lock in every
// tutorial) leaves the counter: the next ownership gets a higher token, and
// the deleted ownership is gone for its holder, whose release and extend
// say so rather than "released".
func TestCounterOutlivesADeletedLock(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		for _, m := range []lua.Tokens{{}, timeTokens} {
			old, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "a", TTL: time.Minute, Level: "ra", Tokens: m})
			require.NoError(t, err)
			require.True(t, old.OK)
			require.NoError(t, rdb.Del(ctx, k.Lock).Err())

			next, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "b", TTL: time.Minute, Level: "rb", Tokens: m})
			require.NoError(t, err)
			require.True(t, next.OK)
			require.Greater(t, next.Token, old.Token, "mode %+v: a DEL must not reset the counter", m)

			held, err := lua.Extend(ctx, rdb, k, "a", old.Token, time.Minute, m)
			require.NoError(t, err)
			require.False(t, held, "the deleted ownership cannot be extended")
			n, err := lua.Release(ctx, rdb, k, "a", old.Token, "ra", m)
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "the deleted ownership was not released by its holder")

			n, err = lua.Release(ctx, rdb, k, "b", next.Token, "rb", m)
			require.NoError(t, err)
			require.Zero(t, n)
		}
	})
}

// The counter key is refused like every other key this library keeps when
// it holds something it did not write, by every script that reads it, and
// left as it was.
func TestForeignCounterRefused(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb := t.Context(), b.Client
		for _, plant := range []struct {
			what string
			set  func(key string) error
		}{
			{"non-numeric string", func(key string) error { return rdb.Set(ctx, key, "x", 0).Err() }},
			{"negative number", func(key string) error { return rdb.Set(ctx, key, "-3", 0).Err() }},
			{"hash", func(key string) error { return rdb.HSet(ctx, key, "t", "3").Err() }},
		} {
			k := keys(t)
			require.NoError(t, plant.set(k.Counter))
			before := testenv.Snapshot(t, rdb, k.Counter)
			calls := map[string]func() error{
				"acquire": func() error {
					_, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"inspect": func() error { _, err := lua.Inspect(ctx, rdb, k); return err },
				"qacquire": func() error {
					_, err := scripts.QAcquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
					return err
				},
				"qraise": func() error { _, err := scripts.QBump(ctx, rdb, k, 5); return err },
			}
			for name, call := range calls {
				err := call()
				require.ErrorIs(t, err, lua.ErrForeign, "%s on a %s", name, plant.what)
				require.ErrorContains(t, err, k.Counter)
				var rerr redis.Error
				require.True(t, errors.As(err, &rerr), "%s: the server's reply keeps its type", name)
			}
			require.Equal(t, before, testenv.Snapshot(t, rdb, k.Counter), "a %s must be left as it was", plant.what)
			require.Zero(t, rdb.Exists(ctx, k.Lock, k.Queue).Val(), "nothing else written beside a %s", plant.what)
		}
	})
}

// A forced unlock ends the named ownership whoever holds it, hands the
// lock to the oldest waiter with a higher token, records who forced it, and
// is harmless to repeat; the forced holder's release and extend find it
// gone.
func TestForceEndsTheOwnershipAndHandsOn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		r := newQueueRig(t, b.Client)
		first := r.acquire("o1", "l1", nil)
		require.True(t, first.OK)
		w2 := r.waiter("o2", 5*time.Second)
		require.False(t, r.acquire("o2", "l2", w2).OK)

		before := time.Now()
		f, err := lua.Force(r.ctx, r.rdb, r.k, first.Token, "ops@host", lua.Tokens{})
		require.NoError(t, err)
		require.Equal(t, lua.ForceResult{Ended: true}, f)
		ch, msg := r.message()
		require.Equal(t, w2.Channel, ch, "the waiter is told")
		st := r.state()
		require.Equal(t, "o2", st.Owner, "the lock went to the waiter")
		require.Greater(t, st.Token, first.Token)
		require.Equal(t, "l2 "+st.Token.String(), msg)
		require.NotNil(t, st.Forced)
		require.Equal(t, first.Token, st.Forced.Token)
		require.Equal(t, "ops@host", st.Forced.By)
		require.WithinDuration(t, before, st.Forced.At, time.Minute)
		require.Contains(t, st.Ended, lua.Ended{Token: first.Token, Owner: "o1", Expired: true, Forced: true})

		again, err := lua.Force(r.ctx, r.rdb, r.k, first.Token, "ops@host", lua.Tokens{})
		require.NoError(t, err)
		require.Equal(t, lua.ForceResult{Repeat: true}, again, "a repeat changes nothing")
		require.Equal(t, "o2", r.state().Owner)

		held, err := lua.Extend(r.ctx, r.rdb, r.k, "o1", first.Token, time.Minute, lua.Tokens{})
		require.NoError(t, err)
		require.False(t, held)
		require.EqualValues(t, -1, r.release("o1", first.Token, "l1"), "a forced ownership was not released")

		// Another token than the holder's: nothing is forced.
		other, err := lua.Force(r.ctx, r.rdb, r.k, st.Token+7, "ops", lua.Tokens{})
		require.NoError(t, err)
		require.Equal(t, lua.ForceResult{Holder: st.Token}, other)
		require.Equal(t, "o2", r.state().Owner)

		// The waiter claims and releases; a force of a free lock says so.
		claimed := r.acquire("o2", "l2", w2)
		require.True(t, claimed.OK)
		require.Zero(t, r.release("o2", claimed.Token, "l2"))
		free, err := lua.Force(r.ctx, r.rdb, r.k, claimed.Token, "ops", lua.Tokens{})
		require.NoError(t, err)
		require.Equal(t, lua.ForceResult{Holder: fence.None}, free)
	})
}

// Bad arguments are refused before anything is read or written.
func TestForceMalformed(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		ctx, rdb, k := t.Context(), b.Client, keys(t)
		a, err := lua.Acquire(ctx, rdb, k, &lua.Request{Owner: "o", TTL: time.Minute, Level: "r"})
		require.NoError(t, err)
		before := testenv.Snapshot(t, rdb, k.Lock)
		_, err = lua.Force(ctx, rdb, k, a.Token, "two\nlines", lua.Tokens{})
		require.ErrorContains(t, err, "malformed forcer")
		_, err = lua.Force(ctx, rdb, k, fence.None, "ops", lua.Tokens{})
		require.ErrorContains(t, err, "malformed token")
		require.Equal(t, before, testenv.Snapshot(t, rdb, k.Lock))
	})
}
