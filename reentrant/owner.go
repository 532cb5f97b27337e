package reentrant

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Owner identifies who holds a lock. Go has no goroutine identity, so
// ownership is explicit: a lock call made with a context that carries an
// Owner acts for that owner, and a lock call on a name its owner already
// holds reenters it. An Owner is a plain string and may be copied, stored
// and sent to another process to hand a lock over on purpose. Lock calls
// return ErrInvalid for an owner that is not 1 to 256 bytes of valid UTF-8
// without control characters.
type Owner string

const maxOwnerLen = 256

func checkOwner(o Owner) error {
	if o == "" {
		return invalid("empty owner")
	}
	return checkText("owner", string(o), maxOwnerLen)
}

// checkText checks a short caller-chosen string stored in Redis and shown
// to operators (an owner, metadata, an identity): valid UTF-8 of at most
// maxLen bytes without control characters, so that it prints safely in
// logs and inspect output.
func checkText(what, s string, maxLen int) error {
	switch {
	case len(s) > maxLen:
		return invalid("%s is %d bytes, the maximum is %d", what, len(s), maxLen)
	case !utf8.ValidString(s):
		return invalid("%s %q is not valid UTF-8", what, s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return invalid("%s %q contains a control character", what, s)
	}
	return nil
}

// NewOwner returns a fresh random owner: 128 bits from crypto/rand, in
// unpadded base64url (22 characters; Redis keeps it in every held lock, so
// shorter than hex's 32 saves memory).
func NewOwner() Owner {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return Owner(base64.RawURLEncoding.EncodeToString(b[:]))
}

type ownerCtxKey struct{}

// WithOwner returns a context that makes lock calls act for o. The owner is
// validated when a lock call uses it (see [Owner]). Use it to
// share ownership on purpose, for example with a worker goroutine or
// another process; [Lease.Context] already carries its owner.
func WithOwner(ctx context.Context, o Owner) context.Context {
	return context.WithValue(ctx, ownerCtxKey{}, o)
}

// OwnerFrom returns the owner ctx carries, if any.
func OwnerFrom(ctx context.Context) (Owner, bool) {
	o, ok := ctx.Value(ownerCtxKey{}).(Owner)
	return o, ok
}

func ownerFor(ctx context.Context) (Owner, error) {
	o, ok := OwnerFrom(ctx)
	if !ok {
		return NewOwner(), nil
	}
	if err := checkOwner(o); err != nil {
		return "", err
	}
	return o, nil
}
