package scripts_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
)

// Concurrent calls through Batched beyond its leaders go out in shared
// pipelines, and each caller still gets its own reply: every name's
// tokens run 1, 2, 3, … and every release answers for its own lock; a
// script's refusal (a foreign value under one name) reaches that caller
// alone, with its type.
func TestBatchedCallsShareRoundTrips(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		var pipes, piped atomic.Int64
		be.Client.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, pipe bool) {
			if pipe {
				pipes.Add(1)
				piped.Add(int64(len(cmds)))
			}
		}})
		b := scripts.Batch(be.Client, 1)
		ctx := context.Background()
		prefix := "batch:" + testenv.Unique(t)
		foreign := scripts.KeysFor(prefix, "foreign")
		require.NoError(t, be.Client.Set(ctx, foreign.Lock, "not a lock", 0).Err())
		const workers, rounds = 12, 40
		var wg sync.WaitGroup
		errs := make(chan error, workers+1)
		for g := range workers {
			wg.Go(func() {
				name := "n" + strconv.Itoa(g)
				k := scripts.KeysFor(prefix, name)
				for i := 1; i <= rounds; i++ {
					level := name + ":" + strconv.Itoa(i)
					a, err := scripts.Acquire(ctx, b, k, &scripts.Request{Owner: name, Level: level, TTL: time.Minute})
					if err != nil || !a.OK || a.Token != fence.Token(i) || a.Depth != 1 {
						errs <- errors.Join(err, errors.New(name+": acquire "+strconv.Itoa(i)+" answered "+strconv.FormatUint(uint64(a.Token), 10)))
						return
					}
					if d, err := scripts.Release(ctx, b, k, name, a.Token, level, scripts.Tokens{}); err != nil || d.Depth != 0 {
						errs <- errors.Join(err, errors.New(name+": release "+strconv.Itoa(i)+" answered depth "+strconv.FormatInt(d.Depth, 10)))
						return
					}
				}
			})
		}
		wg.Go(func() {
			for i := range rounds {
				_, err := scripts.Acquire(ctx, b, foreign, &scripts.Request{Owner: "f", Level: "f:" + strconv.Itoa(i), TTL: time.Minute})
				if !errors.Is(err, scripts.ErrForeign) {
					errs <- errors.Join(err, errors.New("foreign: want ErrForeign"))
					return
				}
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// 13 callers and one leader: most calls wait for a batch.
		require.Positive(t, pipes.Load(), "no call went out in a pipeline")
		require.Greater(t, piped.Load(), pipes.Load(), "pipelines of one command")
		t.Logf("%d pipelines, %.1f commands each", pipes.Load(), float64(piped.Load())/float64(pipes.Load()))
	})
}

// A batch that cannot be sent fails every call in it with the client's
// error, which keeps its type (the connection was refused, so nothing
// ran), and no call is left waiting.
func TestBatchedCallsFailTogether(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	b := scripts.Batch(rdb, 1)
	const callers = 8
	errs := make(chan error, callers)
	for g := range callers {
		go func() {
			k := scripts.KeysFor("batch", "refused")
			_, err := scripts.Acquire(context.Background(), b, k, &scripts.Request{Owner: "o", Level: "l" + strconv.Itoa(g), TTL: time.Minute})
			errs <- err
		}()
	}
	for range callers {
		select {
		case err := <-errs:
			var op *net.OpError
			require.ErrorAs(t, err, &op, "%v", err)
			require.Equal(t, "dial", op.Op)
			require.False(t, scripts.IsRefusal(err))
		case <-time.After(time.Minute): // a generous ceiling; each call fails at its first dial
			t.Fatal("a batched call was left waiting")
		}
	}
}

// A call that waits for a batch is not sent if its context is done by the
// time its batch goes, as the client does not send a command whose context
// is done: it fails with the context's error, and the calls with it still
// go.
func TestBatchedCallCancelledWhileWaiting(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		ctx := context.Background()
		base := "batch:" + testenv.Unique(t)
		hold, held := make(chan struct{}), make(chan struct{})
		var once sync.Once
		be.Client.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, _ bool) {
			if cmds[0].Name() == "set" && cmds[0].Args()[1] == base+":first" {
				once.Do(func() { close(held) })
				<-hold
			}
		}})
		b := scripts.Batch(be.Client, 1)
		set := func(ctx context.Context, key string) chan error {
			done := make(chan error, 1)
			go func() { done <- b.Process(ctx, redis.NewStatusCmd(ctx, "set", key, "v")) }()
			return done
		}
		first := set(ctx, base+":first") // leads, and is held in the hook
		<-held
		cctx, cancel := context.WithCancel(ctx)
		cancelled := set(cctx, base+":cancelled")
		require.Eventually(t, func() bool { return scripts.Waiting(b) == 1 }, time.Minute, time.Millisecond)
		live := set(ctx, base+":live")
		require.Eventually(t, func() bool { return scripts.Waiting(b) == 2 }, time.Minute, time.Millisecond)
		cancel()
		close(hold)
		require.NoError(t, <-first)
		require.ErrorIs(t, <-cancelled, context.Canceled)
		require.NoError(t, <-live)
		n, err := be.Client.Exists(ctx, base+":first", base+":cancelled", base+":live").Result()
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "the cancelled call was sent")
		require.Zero(t, be.Client.Exists(ctx, base+":cancelled").Val())
	})
}

// A call that panics in the client (a hook's panic, which the caller
// recovers) still ends its turn: the calls after it are sent.
func TestBatchedCallPanicEndsItsTurn(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, be testenv.Backend) {
		ctx := context.Background()
		boom := "batch:" + testenv.Unique(t) + ":boom"
		be.Client.AddHook(testenv.Hook{Sent: func(cmds []redis.Cmder, _ bool) {
			if cmds[0].Args()[1] == boom {
				panic("hook")
			}
		}})
		b := scripts.Batch(be.Client, 1)
		require.Panics(t, func() { _ = b.Process(ctx, redis.NewStatusCmd(ctx, "set", boom, "v")) })
		done := make(chan error, 1)
		go func() { done <- b.Process(ctx, redis.NewStatusCmd(ctx, "set", boom+"-after", "v")) }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute): // a generous ceiling: the call is sent at once
			t.Fatal("the call after a panic waits for a turn that never ended")
		}
	})
}
