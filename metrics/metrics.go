package metrics

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redfence/redfence/reentrant"
)

// MeterName is the name of the meter the instruments are created on.
const MeterName = "github.com/redfence/redfence"

// Attribute keys.
const (
	OutcomeKey  = attribute.Key("outcome")   // lock and renewal outcomes
	LockNameKey = attribute.Key("lock.name") // only WithLockNameAttribute
	// HoldKey is "read" or "write" for an RWMutex's leases, "permit" for a
	// Semaphore's; a plain lock's measurements have no such attribute.
	HoldKey  = attribute.Key("lock.hold")
	StoreKey = attribute.Key("store") // the name given to Store or Stale
)

// waitBuckets are the bucket boundaries, in seconds, advised for
// redfence.lock.wait.
var waitBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Option configures [New].
type Option func(*config)

type config struct {
	lockName bool
	attrs    []attribute.KeyValue
}

// WithLockNameAttribute adds the lock's name as attribute "lock.name" to
// every lock instrument. Each distinct name is then a time series of its
// own, kept by the SDK and the backend, and each event builds its attribute
// set: use it only when the lock names are few and known in advance.
func WithLockNameAttribute() Option { return func(c *config) { c.lockName = true } }

// WithAttributes adds kv to every measurement of every instrument, for
// example a service or a Redis cluster name. Later options add to earlier
// ones; a key given twice keeps its last value.
func WithAttributes(kv ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, kv...) }
}

// Metrics records lock events and stale writes on its instruments. It is
// safe for concurrent use, and one Metrics may serve many clients and
// stores.
type Metrics struct {
	cfg config

	acquisitions metric.Int64Counter
	wait         metric.Float64Histogram
	renewals     metric.Int64Counter
	lost         metric.Int64Counter
	releases     metric.Int64Counter
	stale        metric.Int64Counter

	// The attribute sets of the lock instruments, computed once (unless
	// the lock name is an attribute): indexed by hold and event kind.
	add    [len(holds)][kinds][]metric.AddOption
	record [len(holds)][kinds][]metric.RecordOption
}

// holds are the values of reentrant.Event.Hold, and of HoldKey: "" for a
// lock (no attribute), then a read-write lock's leases and a semaphore's
// permits.
var holds = [...]string{"", "read", "write", "permit"}

// holdOf returns the index of an Event's Hold in holds, 0 for an unknown
// one.
func holdOf(h string) int {
	for i, x := range holds {
		if x == h {
			return i
		}
	}
	return 0
}

// The event kinds this package records, as indexes of its arrays.
const (
	acquired = iota + 1
	reentered
	notAcquired
	renewed
	renewFailed
	lost
	released
	kinds
)

// kindOf returns the index of an Event's Kind, 0 for an unknown one.
func kindOf(kind string) int {
	switch kind {
	case "acquired":
		return acquired
	case "reentered":
		return reentered
	case "not_acquired":
		return notAcquired
	case "renewed":
		return renewed
	case "renew_failed":
		return renewFailed
	case "lost":
		return lost
	case "released":
		return released
	}
	return 0
}

// outcome is the outcome attribute of each kind's measurement; "" for none.
var outcome = [kinds]string{
	acquired: "acquired", reentered: "reentered", notAcquired: "not_acquired",
	renewed: "ok", renewFailed: "failed",
}

// New creates the instruments listed in the package documentation on mp's
// meter [MeterName]. It returns an error if mp is nil or creating an
// instrument fails.
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("metrics: nil MeterProvider")
	}
	m := &Metrics{}
	for _, o := range opts {
		o(&m.cfg)
	}
	meter := mp.Meter(MeterName)
	var errs [6]error
	m.acquisitions, errs[0] = meter.Int64Counter("redfence.lock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Lock and TryLock calls, by outcome."))
	m.wait, errs[1] = meter.Float64Histogram("redfence.lock.wait", metric.WithUnit("s"),
		metric.WithDescription("How long Lock and TryLock calls took, by outcome."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	m.renewals, errs[2] = meter.Int64Counter("redfence.lock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals, by outcome."))
	m.lost, errs[3] = meter.Int64Counter("redfence.lock.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Lock ownerships that ended without Unlock."))
	m.releases, errs[4] = meter.Int64Counter("redfence.lock.releases", metric.WithUnit("{release}"),
		metric.WithDescription("Unlocks that released a lock."))
	m.stale, errs[5] = meter.Int64Counter("redfence.store.stale_refused", metric.WithUnit("{write}"),
		metric.WithDescription("Writes a fenced store refused for a stale token, by store."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if !m.cfg.lockName {
		for h := range holds {
			for k := range kinds {
				set := m.lockSet(k, h, "")
				m.add[h][k] = []metric.AddOption{metric.WithAttributeSet(set)}
				m.record[h][k] = []metric.RecordOption{metric.WithAttributeSet(set)}
			}
		}
	}
	return m, nil
}

// lockSet returns the attribute set of a lock instrument's measurement for
// an event of kind k on a hold (an index of holds) of the lock name
// (ignored without the option).
func (m *Metrics) lockSet(k, h int, name string) attribute.Set {
	kv := make([]attribute.KeyValue, 0, len(m.cfg.attrs)+3)
	kv = append(kv, m.cfg.attrs...)
	if o := outcome[k]; o != "" {
		kv = append(kv, OutcomeKey.String(o))
	}
	if h > 0 {
		kv = append(kv, HoldKey.String(holds[h]))
	}
	if m.cfg.lockName {
		kv = append(kv, LockNameKey.String(name))
	}
	return attribute.NewSet(kv...)
}

// Option returns the client option that sends the client's events to m:
// reentrant.New(rdb, m.Option()) is reentrant.WithObserver(m.Observe).
func (m *Metrics) Option() reentrant.ClientOption { return reentrant.WithObserver(m.Observe) }

// Observe records e on the lock instruments; events of unknown kinds are
// ignored. Without WithLockNameAttribute it does not allocate in this
// package. To observe a client for other purposes as well, call Observe from
// the function given to reentrant.WithObserver.
func (m *Metrics) Observe(e reentrant.Event) {
	k := kindOf(e.Kind)
	if k == 0 {
		return
	}
	h := holdOf(e.Hold)
	add, record := m.add[h][k], m.record[h][k]
	if m.cfg.lockName {
		o := metric.WithAttributeSet(m.lockSet(k, h, e.Name))
		add, record = []metric.AddOption{o}, []metric.RecordOption{o}
	}
	ctx := context.Background()
	switch k {
	case acquired, reentered, notAcquired:
		m.acquisitions.Add(ctx, 1, add...)
		m.wait.Record(ctx, e.Wait.Seconds(), record...)
	case renewed, renewFailed:
		m.renewals.Add(ctx, 1, add...)
	case lost:
		m.lost.Add(ctx, 1, add...)
	case released:
		m.releases.Add(ctx, 1, add...)
	}
}
