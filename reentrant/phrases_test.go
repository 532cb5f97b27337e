package reentrant_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/phrase"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage/memory"
)

// repeatedPhrase is phrase.Repeated: the first run of n words msg says
// twice, or "".
func repeatedPhrase(msg string, n int) string { return phrase.Repeated(msg, n) }

// A store's refusal of a write under a lease that has ended carries why it
// ended (the lease context's cause), not a bare "context canceled".
func TestStoreRefusalCarriesTheLeaseCause(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client)
		name := testenv.Unique(t)
		l, err := c.Lock(t.Context(), name)
		require.NoError(t, err)
		require.NoError(t, reentrant.ForceUnlockToken(c, t.Context(), name, l.Token()))
		require.ErrorIs(t, l.Extend(t.Context(), time.Minute), reentrant.ErrNotHeld, "an extend finds it gone")
		select {
		case <-l.Done():
		case <-time.After(time.Minute):
			t.Fatal("the lease outlived the forced unlock its extend found")
		}
		err = memory.New().Put(l.Context(), "k", []byte("late"), l.Token())
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, reentrant.ErrLost)
		require.ErrorIs(t, err, l.Err())
		require.Empty(t, repeatedPhrase(err.Error(), 4), "said twice in %q", err)
	})
}

// Do's error, when fn's write was refused because the lease was lost, says
// why once: Unlock's "not held" would repeat the cause fn's error carries.
func TestDoSaysTheLossOnce(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		c := newClient(t, b.Client)
		name := testenv.Unique(t)
		err := c.Do(t.Context(), name, func(ctx context.Context, tok fence.Token) error {
			// An operator deletes the hold: the next renewal finds it gone.
			if err := b.Client.Del(t.Context(), scripts.KeysFor(prefix, name).Lock).Err(); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute):
				t.Fatal("the lease outlived the forced unlock by a minute")
			}
			return memory.New().Put(ctx, "k", []byte("late"), tok)
		}, reentrant.WithRenewInterval(20*time.Millisecond))
		require.ErrorIs(t, err, reentrant.ErrLost)
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, repeatedPhrase(err.Error(), 4), "said twice in %q", err)
	})
}
