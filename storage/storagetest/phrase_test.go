package storagetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
)

// repeating is a store whose Put fails with a message that says a thing
// twice, and whose other methods fail with one that does not.
type repeating struct{ storage.Store }

func (repeating) Put(context.Context, string, []byte, fence.Token) error {
	return errors.New("store: write refused: disk full: store: write refused: disk full")
}

func (repeating) Get(context.Context, string) (storage.Record, error) {
	return storage.Record{}, errors.New("store: get: not found")
}

// The suite's wrapper reports an error message that repeats itself, and
// only such a message.
func TestPhraseCheckedReportsRepeats(t *testing.T) {
	var got []string
	s := phraseChecked{repeating{}, func(format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) }}
	_, _ = s.Get(t.Context(), "k")
	if len(got) != 0 {
		t.Fatalf("reported a message said once: %v", got)
	}
	_ = s.Put(t.Context(), "k", nil, 1)
	if len(got) != 1 {
		t.Fatalf("reported %d messages, want the repeating one: %v", len(got), got)
	}
}
