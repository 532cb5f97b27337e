package netfault_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/netfault"
)

// TestRetriedIncrAppliesTwice documents the hazard the lock's scripts are
// idempotent for: when a reply is late, go-redis times out, drops the
// connection, and sends the command again on a new one, so Redis executes a
// command the caller sees succeed once twice.
func TestRetriedIncrAppliesTwice(t *testing.T) {
	m := miniredis.RunT(t)
	p, err := netfault.New(m.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c := redis.NewClient(&redis.Options{
		Addr: p.Addr(),
		// Long enough that the retry's reply, which is not delayed, comes
		// within it on a loaded machine (a third attempt would count 3).
		ReadTimeout: 500 * time.Millisecond,
		MaxRetries:  2,
	})
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	// Open the connection first, so the delay hits INCR's reply and not the
	// connection handshake's.
	require.NoError(t, c.Ping(ctx).Err())

	p.DelayNext(netfault.Downstream, 2*time.Second)
	start := time.Now()
	n, err := c.Incr(ctx, "k").Result()
	require.NoError(t, err, "the retry hides the timeout from the caller")

	assert.Equal(t, int64(2), n, "INCR's reply counts both executions")
	v, err := m.Get("k")
	require.NoError(t, err)
	assert.Equal(t, "2", v, "Redis applied INCR twice")
	assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "the first attempt timed out")
	s := p.Stats()
	assert.Equal(t, int64(2), s.Accepted, "the retry used a new connection")
	assert.Equal(t, int64(1), s.Delayed[netfault.Downstream])
}
