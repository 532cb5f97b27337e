package storage_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/redfence/redfence/storage"
)

func TestCheckKey(t *testing.T) {
	for _, key := range []string{"k", "\x00", "{}", "\xff", strings.Repeat("x", storage.MaxKeyLen)} {
		if err := storage.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%d-byte key %.8q): %v; want nil", len(key), key, err)
		}
	}
	for _, key := range []string{"", strings.Repeat("x", storage.MaxKeyLen+1), strings.Repeat("é", storage.MaxKeyLen/2+1)} {
		if err := storage.CheckKey(key); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("CheckKey(%d-byte key): %v; want storage.ErrInvalid", len(key), err)
		}
	}
}
