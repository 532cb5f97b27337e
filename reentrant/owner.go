package reentrant

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Owner identifies who holds a lock. Go has no goroutine identity, so
// ownership is explicit: a lock call made with a context that carries an
// Owner acts for that owner, and a lock call on a name its owner already
// holds reenters it. An Owner is a plain string and may be copied, stored
// and sent to another process to hand a lock over on purpose.
type Owner string

// MaxOwnerLen is the longest Owner accepted, in bytes.
const MaxOwnerLen = 256

// CheckOwner reports why o cannot be an owner, or nil: an owner is 1 to
// MaxOwnerLen bytes of valid UTF-8 without control characters (so it prints
// safely in logs and inspect output). Lock calls return
// ErrInvalid for such an owner.
func CheckOwner(o Owner) error {
	switch {
	case o == "":
		return invalid("empty owner")
	case len(o) > MaxOwnerLen:
		return invalid("owner is %d bytes, the maximum is %d", len(o), MaxOwnerLen)
	case !utf8.ValidString(string(o)):
		return invalid("owner %q is not valid UTF-8", o)
	case strings.IndexFunc(string(o), unicode.IsControl) >= 0:
		return invalid("owner %q contains a control character", o)
	}
	return nil
}

// NewOwner returns a fresh random owner: 128 bits from crypto/rand, in hex.
func NewOwner() Owner {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return Owner(hex.EncodeToString(b[:]))
}

type ownerKey struct{}

// WithOwner returns a context that makes lock calls act for o. The owner is
// validated when a lock call uses it (see [CheckOwner]). Use it to
// share ownership on purpose, for example with a worker goroutine or
// another process; [Lease.Context] already carries its owner.
func WithOwner(ctx context.Context, o Owner) context.Context {
	return context.WithValue(ctx, ownerKey{}, o)
}

// OwnerFrom returns the owner ctx carries, if any.
func OwnerFrom(ctx context.Context) (Owner, bool) {
	o, ok := ctx.Value(ownerKey{}).(Owner)
	return o, ok
}

func ownerFor(ctx context.Context) (Owner, error) {
	o, ok := OwnerFrom(ctx)
	if !ok {
		return NewOwner(), nil
	}
	if err := CheckOwner(o); err != nil {
		return "", err
	}
	return o, nil
}
