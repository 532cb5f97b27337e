package metrics_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/redfence/redfence/internal/scripts"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/internal/tuning"
	"github.com/redfence/redfence/metrics"
	"github.com/redfence/redfence/reentrant"
)

// harness is a Metrics on an SDK MeterProvider read by a ManualReader.
type harness struct {
	reader *sdkmetric.ManualReader
	m      *metrics.Metrics
}

func newHarness(t *testing.T, opts ...metrics.Option) *harness {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := metrics.New(mp, opts...)
	require.NoError(t, err)
	return &harness{reader: r, m: m}
}

// collected is one collection: per instrument, per encoded attribute set
// ("k=v,k=v"; "" for none), the counter's sum or the histogram's count.
type collected struct {
	counts map[string]map[string]int64
	sums   map[string]map[string]float64 // histograms only
	units  map[string]string
}

func (h *harness) collect(t *testing.T) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, h.reader.Collect(context.Background(), &rm))
	c := collected{counts: map[string]map[string]int64{}, sums: map[string]map[string]float64{}, units: map[string]string{}}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, metrics.MeterName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			c.units[m.Name] = m.Unit
			pts := map[string]int64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				require.True(t, d.IsMonotonic, m.Name)
				for _, p := range d.DataPoints {
					pts[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			case metricdata.Histogram[float64]:
				c.sums[m.Name] = map[string]float64{}
				for _, p := range d.DataPoints {
					k := p.Attributes.Encoded(attribute.DefaultEncoder())
					pts[k] = int64(p.Count)
					c.sums[m.Name][k] = p.Sum
				}
			default:
				t.Fatalf("%s: unexpected aggregation %T", m.Name, m.Data)
			}
			c.counts[m.Name] = pts
		}
	}
	return c
}

// recorder counts the events a client reports, by kind, and adds up waits.
type recorder struct {
	mu   sync.Mutex
	n    map[string]int64
	wait float64
}

func (r *recorder) add(e reentrant.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int64{}
	}
	r.n[e.Kind]++
	r.wait += e.Wait.Seconds()
}

func (r *recorder) count(k string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[k]
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// failPipelines fails every pipeline (the renewer's batches) while on.
type failPipelines struct{ on *atomic.Bool }

func (failPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (failPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			return errors.New("injected pipeline failure")
		}
		return next(ctx, cmds)
	}
}

// A real client goes through every kind of event; the instruments count
// each exactly once, with only the outcome attribute.
func TestLockEvents(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		h := newHarness(t)
		var rec recorder
		var failing atomic.Bool
		rdb := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(failPipelines{&failing})
		prefix := testenv.Unique(t)
		c, err := reentrant.New(rdb, reentrant.WithPrefix(prefix),
			reentrant.WithTTL(time.Second), tuning.RenewInterval(50*time.Millisecond).(reentrant.CallOption),
			reentrant.WithObserver(func(e reentrant.Event) { rec.add(e); h.m.Observe(e) }))
		require.NoError(t, err)
		defer c.Close()
		ctx := t.Context()

		// a: acquired, reentered, refused to another owner, released.
		outer, err := c.Lock(ctx, "a")
		require.NoError(t, err)
		inner, err := c.Lock(outer.Context(), "a")
		require.NoError(t, err)
		require.EqualValues(t, 2, inner.Depth())
		_, err = c.TryLock(ctx, "a")
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.NoError(t, inner.Unlock(ctx))
		require.NoError(t, outer.Unlock(ctx))

		// b: renewed, then lost: its key is deleted under it.
		held, err := c.Lock(ctx, "b")
		require.NoError(t, err)
		eventually(t, "a renewal", func() bool { return rec.count("renewed") > 0 })
		require.NoError(t, b.Client.Del(ctx, scripts.KeysFor(prefix, "b").Lock).Err())
		eventually(t, "the loss of b", func() bool { return rec.count("lost") == 1 })
		require.ErrorIs(t, held.Err(), reentrant.ErrLost)

		// c: its renewals fail until the lease runs out.
		failed, err := c.Lock(ctx, "c")
		require.NoError(t, err)
		failing.Store(true)
		eventually(t, "the loss of c", func() bool { return rec.count("lost") == 2 })
		failing.Store(false)
		require.ErrorIs(t, failed.Err(), reentrant.ErrLost)
		require.NoError(t, c.Close())

		got := h.collect(t)
		outcomes := map[string]int64{"outcome=acquired": 3, "outcome=reentered": 1, "outcome=not_acquired": 1}
		require.Equal(t, outcomes, got.counts["redfence.lock.acquisitions"])
		require.Equal(t, outcomes, got.counts["redfence.lock.wait"])
		var waits float64
		for _, s := range got.sums["redfence.lock.wait"] {
			waits += s
		}
		require.InDelta(t, rec.wait, waits, 1e-9, "waits are recorded in seconds")
		require.Positive(t, rec.count("renewed"))
		require.Positive(t, rec.count("renew_failed"))
		require.Equal(t, map[string]int64{
			"outcome=ok":     rec.count("renewed"),
			"outcome=failed": rec.count("renew_failed"),
		}, got.counts["redfence.lock.renewals"])
		require.Equal(t, map[string]int64{"": 2}, got.counts["redfence.lock.lost"])
		require.Equal(t, map[string]int64{"": 1}, got.counts["redfence.lock.releases"])
		require.Equal(t, map[string]string{
			"redfence.lock.acquisitions": "{acquisition}", "redfence.lock.wait": "s",
			"redfence.lock.renewals": "{renewal}", "redfence.lock.lost": "{lease}",
			"redfence.lock.releases": "{release}",
		}, got.units)
	})
}

// With WithLockNameAttribute every lock measurement carries the name, and
// WithAttributes adds its attributes to all of them.
func TestLockNameAndCommonAttributes(t *testing.T) {
	_, rdb := testenv.Mini(t)
	h := newHarness(t, metrics.WithLockNameAttribute(), metrics.WithAttributes(attribute.String("service", "billing")))
	c, err := reentrant.New(rdb, reentrant.WithoutRenewal(), h.m.Option())
	require.NoError(t, err)
	defer c.Close()
	ctx := t.Context()
	x, err := c.Lock(ctx, "x")
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "x")
	require.ErrorIs(t, err, reentrant.ErrNotAcquired)
	y, err := c.TryLock(ctx, "y")
	require.NoError(t, err)
	require.NoError(t, x.Unlock(ctx))
	require.NoError(t, y.Unlock(ctx))

	got := h.collect(t)
	want := map[string]int64{
		"lock.name=x,outcome=acquired,service=billing":     1,
		"lock.name=x,outcome=not_acquired,service=billing": 1,
		"lock.name=y,outcome=acquired,service=billing":     1,
	}
	require.Equal(t, want, got.counts["redfence.lock.acquisitions"])
	require.Equal(t, want, got.counts["redfence.lock.wait"])
	require.Equal(t, map[string]int64{"lock.name=x,service=billing": 1, "lock.name=y,service=billing": 1},
		got.counts["redfence.lock.releases"])
}

// Observe maps each kind to its instrument, records waits in seconds and
// ignores kinds it does not know.
func TestObserveEvents(t *testing.T) {
	h := newHarness(t, metrics.WithAttributes(attribute.String("env", "test")))
	for _, e := range []reentrant.Event{
		{Kind: "acquired", Name: "n", Wait: 1500 * time.Millisecond},
		{Kind: "acquired", Name: "n", Wait: 500 * time.Millisecond},
		{Kind: "not_acquired", Name: "n", Wait: 250 * time.Millisecond, Err: reentrant.ErrNotAcquired},
		{Kind: "renewed"}, {Kind: "renewed"}, {Kind: "renew_failed"},
		{Kind: "lost"}, {Kind: "released"}, {Kind: "released"}, {Kind: "released"},
		{Kind: ""}, {Kind: "unknown"}, {Kind: "Released"}, {Kind: "99"},
	} {
		h.m.Observe(e)
	}
	got := h.collect(t)
	require.Equal(t, map[string]int64{"env=test,outcome=acquired": 2, "env=test,outcome=not_acquired": 1},
		got.counts["redfence.lock.acquisitions"])
	require.Equal(t, map[string]int64{"env=test,outcome=acquired": 2, "env=test,outcome=not_acquired": 1},
		got.counts["redfence.lock.wait"])
	require.Equal(t, map[string]float64{"env=test,outcome=acquired": 2, "env=test,outcome=not_acquired": 0.25},
		got.sums["redfence.lock.wait"])
	require.Equal(t, map[string]int64{"env=test,outcome=ok": 2, "env=test,outcome=failed": 1},
		got.counts["redfence.lock.renewals"])
	require.Equal(t, map[string]int64{"env=test": 1}, got.counts["redfence.lock.lost"])
	require.Equal(t, map[string]int64{"env=test": 3}, got.counts["redfence.lock.releases"])
	require.NotContains(t, got.counts, "redfence.store.stale_refused")
}

func TestNewNilProvider(t *testing.T) {
	m, err := metrics.New(nil)
	require.Error(t, err)
	require.Nil(t, m)
}

// Without the lock name, Observe allocates nothing: on the no-op provider,
// nor on the SDK's once a series exists.
func TestObserveDoesNotAllocate(t *testing.T) {
	sdk := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
	for name, mp := range map[string]metric.MeterProvider{"noop": noop.NewMeterProvider(), "sdk": sdk} {
		m, err := metrics.New(mp)
		require.NoError(t, err)
		for _, k := range []string{"acquired", "renewed", "lost", "released"} {
			e := reentrant.Event{Kind: k, Name: "n", Wait: time.Millisecond}
			m.Observe(e)
			require.Zero(t, testing.AllocsPerRun(100, func() { m.Observe(e) }), "%s: %v", name, k)
		}
	}
}

// A client built without the observer (and so without this package) locks,
// reenters and unlocks as usual.
func TestClientWithoutObserver(t *testing.T) {
	_, rdb := testenv.Mini(t)
	c, err := reentrant.New(rdb)
	require.NoError(t, err)
	defer c.Close()
	l, err := c.Lock(t.Context(), "quiet")
	require.NoError(t, err)
	in, err := c.TryLock(l.Context(), "quiet")
	require.NoError(t, err)
	require.NoError(t, in.Unlock(t.Context()))
	require.NoError(t, l.Unlock(t.Context()))
}

// An RWMutex's leases and a Semaphore's permits are counted with the
// attribute lock.hold, a plain lock's without it.
func TestSharedHoldEvents(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		h := newHarness(t)
		c, err := reentrant.New(b.Client, reentrant.WithPrefix(testenv.Unique(t)), h.m.Option())
		require.NoError(t, err)
		defer c.Close()
		ctx := t.Context()
		rw, sem := c.RWMutex("doc"), c.Semaphore("pool", 1)

		w, err := rw.Lock(ctx)
		require.NoError(t, err)
		_, err = rw.TryRLock(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		r, err := rw.RLock(w.Context()) // the writer's owner reads at once
		require.NoError(t, err)
		require.NoError(t, w.Unlock(ctx))
		require.NoError(t, r.Unlock(ctx))
		p, err := sem.Acquire(ctx)
		require.NoError(t, err)
		_, err = sem.TryAcquire(ctx)
		require.ErrorIs(t, err, reentrant.ErrNotAcquired)
		require.NoError(t, p.Unlock(ctx))
		l, err := c.Lock(ctx, "doc")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))

		got := h.collect(t)
		require.Equal(t, map[string]int64{
			"lock.hold=write,outcome=acquired":      1,
			"lock.hold=read,outcome=acquired":       1,
			"lock.hold=read,outcome=not_acquired":   1,
			"lock.hold=permit,outcome=acquired":     1,
			"lock.hold=permit,outcome=not_acquired": 1,
			"outcome=acquired":                      1,
		}, got.counts["redfence.lock.acquisitions"])
		require.Equal(t, map[string]int64{"lock.hold=write": 1, "lock.hold=read": 1, "lock.hold=permit": 1, "": 1},
			got.counts["redfence.lock.releases"])
	})
}
