package storagetest

import (
	"context"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/phrase"
	"github.com/redfence/redfence/storage"
)

// phraseChecked is a store whose every error the suite gets is checked
// for a phrase of four words said twice: a chain of wrapped errors (the
// adapter's, the driver's, a context's cause) should say each thing once.
type phraseChecked struct {
	storage.Store
	errorf func(format string, args ...any) // the subtest's t.Errorf
}

func (s phraseChecked) check(op string, err error) {
	if err == nil {
		return
	}
	if p := phrase.Repeated(err.Error(), 4); p != "" {
		s.errorf("%s: %q says %q twice", op, err, p)
	}
}

func (s phraseChecked) Get(ctx context.Context, key string) (storage.Record, error) {
	r, err := s.Store.Get(ctx, key)
	s.check("Get", err)
	return r, err
}

func (s phraseChecked) Put(ctx context.Context, key string, value []byte, token fence.Token) error {
	err := s.Store.Put(ctx, key, value, token)
	s.check("Put", err)
	return err
}

func (s phraseChecked) Delete(ctx context.Context, key string, token fence.Token) error {
	err := s.Store.Delete(ctx, key, token)
	s.check("Delete", err)
	return err
}

func (s phraseChecked) Highest(ctx context.Context, key string) (fence.Token, error) {
	h, err := s.Store.Highest(ctx, key)
	s.check("Highest", err)
	return h, err
}
