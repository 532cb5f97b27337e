// Package memory is the in-memory fenced store: a mutex and a map. It is the
// reference implementation every other adapter is checked against, and a
// convenient store for tests and single-process programs.
package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/ctxerr"
	"github.com/redfence/redfence/storage"
)

var _ storage.Store = (*Store)(nil)

type entry struct {
	value   []byte // nil when deleted or never written
	present bool
	token   fence.Token // token of the last accepted write of value
	highest fence.Token
}

// Store is an in-memory [storage.Store]. The zero value is not usable; call
// [New]. A Store is safe for concurrent use and must not be copied.
// It keeps copies of the values it is given and returns copies, so callers
// may reuse their slices.
type Store struct {
	mu   sync.Mutex
	data map[string]*entry
}

// New returns an empty Store.
func New() *Store { return &Store{data: make(map[string]*entry)} }

// checkKey applies the one key rule of package storage, so the reference
// refuses exactly the keys every other adapter refuses.
func checkKey(key string) error {
	if err := storage.CheckKey(key); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	return nil
}

// Get implements [storage.Store].
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	if err := checkKey(key); err != nil {
		return storage.Record{}, err
	}
	if err := ctxerr.Of(ctx); err != nil {
		return storage.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.data[key]
	if e == nil || !e.present {
		return storage.Record{}, fmt.Errorf("memory: get %q: %w", key, storage.ErrNotFound)
	}
	return storage.Record{Value: append([]byte{}, e.value...), Token: e.token}, nil
}

// Put implements [storage.Store].
func (s *Store) Put(ctx context.Context, key string, value []byte, token fence.Token) error {
	return s.write(ctx, key, token, func(e *entry) {
		e.value, e.present, e.token = append([]byte{}, value...), true, token
	})
}

// Delete implements [storage.Store].
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, key, token, func(e *entry) {
		e.value, e.present, e.token = nil, false, fence.None
	})
}

func (s *Store) write(ctx context.Context, key string, token fence.Token, apply func(*entry)) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := ctxerr.Of(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.data[key]
	if e == nil {
		e = &entry{}
	}
	if err := fence.Check(e.highest, token); err != nil {
		return fmt.Errorf("memory: write %q: %w", key, err)
	}
	s.data[key] = e
	e.highest = token
	apply(e)
	return nil
}

// Highest implements [storage.Store].
func (s *Store) Highest(ctx context.Context, key string) (fence.Token, error) {
	if err := checkKey(key); err != nil {
		return fence.None, err
	}
	if err := ctxerr.Of(ctx); err != nil {
		return fence.None, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.data[key]; e != nil {
		return e.highest, nil
	}
	return fence.None, nil
}
