// Package fence defines the fencing token that redfence locks hand out and
// the single rule every fenced store applies to it.
//
// A token is a positive 64-bit integer issued by a lock each time it passes
// from free to held. Tokens of successive ownerships of one lock strictly
// increase; reentry by the current owner keeps the token. A store that
// remembers the highest token it has accepted for a resource, and refuses
// anything lower, turns a paused lock holder's late write into an error
// instead of silent corruption.
package fence

import (
	"errors"
	"fmt"
	"strconv"
)

// Token is a fencing token. The zero value means "no token": it is never
// issued by a lock and is refused by every store. Tokens are compared as
// unsigned integers; a Token may be copied freely.
type Token uint64

// None is the zero Token, meaning "no token".
const None Token = 0

var (
	// ErrStale reports a write refused because its token is lower than the
	// highest token the store has already accepted for the resource. The
	// concrete error is a *StaleError carrying both tokens.
	ErrStale = errors.New("fence: stale token")

	// ErrNoToken reports that the zero Token was presented where a real
	// token is required. A zero token is never treated as "unfenced".
	ErrNoToken = errors.New("fence: zero token")
)

// StaleError is the error a store returns for a stale write.
// errors.Is(err, ErrStale) holds for it.
type StaleError struct {
	Token   Token // the token presented with the write
	Highest Token // the highest token already accepted
}

// Error reports both tokens.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token %d (highest accepted %d)", e.Token, e.Highest)
}

// Is makes errors.Is(err, ErrStale) hold.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Check applies the fencing rule: a write carrying token t is allowed for a
// resource whose highest accepted token is highest iff t is not zero and
// t >= highest. Equal is allowed because one holder writes many times under
// one token. Check returns nil, an error wrapping ErrNoToken, or a
// *StaleError. The caller must record max(highest, t) in the same atomic
// step as the write it guards.
func Check(highest, t Token) error {
	if t == None {
		return ErrNoToken
	}
	if t < highest {
		return &StaleError{Token: t, Highest: highest}
	}
	return nil
}

// String formats t in decimal, as Redis stores it.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// Parse reads a decimal token as Redis stores it. It rejects the empty
// string, signs, non-digits and values that overflow 64 bits; "0" parses to
// None without error, so callers decide whether a zero token is acceptable.
func Parse(s string) (Token, error) {
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return None, fmt.Errorf("fence: parse token %q: %w", s, err)
	}
	return Token(u), nil
}
