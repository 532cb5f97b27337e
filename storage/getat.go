package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/redfence/redfence/fence"
)

// GetAt is a fenced read: it returns key's record, as s.Get does, when the
// record's token is at or below token, the token of the last write granted
// before the reader's lease (its epoch). A read lease of a fenced
// read-write lock carries that token (or, when Redis knows no write, a
// fresh token above every token issued before, which accepts every record
// written before it): GetAt tells its holder whether what it read is the
// state its lease was granted on. token fence.None makes every record,
// all written with tokens above None, too new.
//
// The check is made against the record Get returned, in that one read: a
// reader that acts on a record GetAt returned knows that no writer with a
// token above its epoch had written that key when the record was read.
// GetAt does not stop such a writer from writing right after; the reader
// must still check its own lease's context (or Err) before it acts, and
// nothing fences its actions outside the store. A record written with
// token itself is returned, since the store accepts equal tokens: a
// holder of that token whose lease had already ended can have written it.
//
// Errors:
//   - When the record was written with a token above token, GetAt returns
//     an error wrapping a *fence.StaleError with Token set to token and
//     Highest to the record's token (errors.Is(err, fence.ErrStale)
//     holds), saying that a newer writer wrote the key since the reader's
//     epoch, with both tokens.
//   - When key has no value, GetAt calls s.Highest: if the highest token
//     accepted for key is above token (a newer writer deleted the value,
//     or wrote one since the Get), the error is stale as above, with
//     Highest set to that token, and does not wrap ErrNotFound; otherwise
//     GetAt returns Get's error, wrapping ErrNotFound. An error from
//     Highest is returned as Highest returned it: absence is not confirmed.
//   - Any other error from Get (ErrInvalid for a bad key, a backend or
//     context error) is returned as Get returned it.
//
// GetAt works on every [Store], whatever the adapter, because it is built
// on the interface alone: one Get, and one Highest when the key has no
// value.
func GetAt(ctx context.Context, s Store, key string, token fence.Token) (Record, error) {
	rec, err := s.Get(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		h, herr := s.Highest(ctx, key)
		if herr != nil {
			return Record{}, herr
		}
		if h > token {
			return Record{}, fmt.Errorf("storage: get %q at epoch %d: no value, and a newer writer wrote it since the reader's epoch (highest token %d): %w",
				key, token, h, &fence.StaleError{Token: token, Highest: h})
		}
		return Record{}, err
	case err != nil:
		return Record{}, err
	case rec.Token > token:
		return Record{}, fmt.Errorf("storage: get %q at epoch %d: a newer writer wrote it since the reader's epoch (record token %d): %w",
			key, token, rec.Token, &fence.StaleError{Token: token, Highest: rec.Token})
	}
	return rec, nil
}
