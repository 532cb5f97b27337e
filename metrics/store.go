package metrics

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// Store returns s wrapped so that every Put and Delete that s refuses with
// a stale token (errors.Is(err, fence.ErrStale)) adds one to
// redfence.store.stale_refused with store=name. Every call goes to s and
// returns its results and errors unchanged. The wrapper has only the
// methods of storage.Store: count sqlstore's Guard with [Metrics.Stale].
// Store panics if s is nil.
func (m *Metrics) Store(name string, s storage.Store) storage.Store {
	if s == nil {
		panic("metrics: Store of a nil storage.Store")
	}
	return &store{s: s, stale: m.stale, opts: []metric.AddOption{metric.WithAttributeSet(m.storeSet(name))}}
}

// Stale adds one to redfence.store.stale_refused with store=name if
// errors.Is(err, fence.ErrStale), and returns err unchanged, for refusals
// that do not go through [Metrics.Store]. For sqlstore's Guard:
//
//	if err := m.Stale(ctx, "ledger", fences.Guard(ctx, tx, "accounts/1", token)); err != nil {
//		return err
//	}
func (m *Metrics) Stale(ctx context.Context, name string, err error) error {
	if err != nil && errors.Is(err, fence.ErrStale) {
		m.stale.Add(orBackground(ctx), 1, metric.WithAttributeSet(m.storeSet(name)))
	}
	return err
}

// orBackground returns ctx, or the background context for a nil ctx (which
// the store refused anyway) so that recording cannot fail on it.
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// storeSet returns the attribute set of a refusal by the store name.
func (m *Metrics) storeSet(name string) attribute.Set {
	kv := make([]attribute.KeyValue, 0, len(m.cfg.attrs)+1)
	kv = append(kv, m.cfg.attrs...)
	return attribute.NewSet(append(kv, StoreKey.String(name))...)
}

// store is the wrapper Metrics.Store returns.
type store struct {
	s     storage.Store
	stale metric.Int64Counter
	opts  []metric.AddOption
}

func (w *store) Get(ctx context.Context, key string) (storage.Record, error) {
	return w.s.Get(ctx, key)
}

func (w *store) Put(ctx context.Context, key string, value []byte, token fence.Token) error {
	return w.count(ctx, w.s.Put(ctx, key, value, token))
}

func (w *store) Delete(ctx context.Context, key string, token fence.Token) error {
	return w.count(ctx, w.s.Delete(ctx, key, token))
}

func (w *store) Highest(ctx context.Context, key string) (fence.Token, error) {
	return w.s.Highest(ctx, key)
}

// count records err if it is a stale refusal, and returns it.
func (w *store) count(ctx context.Context, err error) error {
	if err != nil && errors.Is(err, fence.ErrStale) {
		w.stale.Add(orBackground(ctx), 1, w.opts...)
	}
	return err
}
