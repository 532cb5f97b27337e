package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/ctxerr"
	"github.com/redfence/redfence/storage"
)

// Metadata names, without S3's "x-amz-meta-" (package documentation).
const (
	metaToken   = "redfence-token"
	metaKey     = "redfence-key"
	metaDeleted = "redfence-deleted"
	metaMD5     = "redfence-md5"
)

// nonceLen is the length of the random bytes that open every object's body,
// so that every write has an ETag of its own.
const nonceLen = 16

// Get implements [storage.Store]: one GET, made again (up to
// [WithMaxAttempts] times, then [ErrContended]) when the server answered
// with one write's body beside another's metadata. A key with no object,
// or whose object is a tombstone, is storage.ErrNotFound; an object this
// package did not write is [ErrForeign].
func (s *Store) Get(ctx context.Context, key string) (storage.Record, error) {
	if err := checkKey(key); err != nil {
		return storage.Record{}, err
	}
	if err := ctxerr.Of(ctx); err != nil {
		return storage.Record{}, err
	}
	name := s.name(key)
	// A server may pair one write's body with another's metadata (see
	// current); the MD5 in the metadata tells, and a torn read is retried.
	for n := 1; ; n++ {
		out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &name})
		if err != nil {
			if code(err) == "NoSuchKey" {
				return storage.Record{}, fmt.Errorf("s3store: get %q: %w", key, storage.ErrNotFound)
			}
			return storage.Record{}, s.fail(ctx, "get", key, err)
		}
		body, err := io.ReadAll(out.Body)
		_ = out.Body.Close()
		if err != nil {
			return storage.Record{}, s.fail(ctx, "get", key, err)
		}
		tok, deleted, err := parseMeta(out.Metadata)
		if err != nil || len(body) < nonceLen {
			return storage.Record{}, fmt.Errorf("s3store: get %q: object %s: %w", key, name, ErrForeign)
		}
		if sum := md5.Sum(body); hex.EncodeToString(sum[:]) != out.Metadata[metaMD5] {
			if n >= s.cfg.maxAttempts {
				return storage.Record{}, fmt.Errorf("s3store: get %q: %w: body and metadata of different writes in %d reads", key, ErrContended, n)
			}
			continue
		}
		if deleted {
			return storage.Record{}, fmt.Errorf("s3store: get %q: %w", key, storage.ErrNotFound)
		}
		return storage.Record{Value: body[nonceLen:], Token: tok}, nil
	}
}

// Put implements [storage.Store]: a HEAD and a conditional PUT, repeated
// while other writers change the object in between (package
// documentation). Besides the errors of the contract it returns
// [ErrContended] and [ErrForeign].
func (s *Store) Put(ctx context.Context, key string, value []byte, token fence.Token) error {
	return s.write(ctx, "put", key, value, token, false)
}

// Delete implements [storage.Store] by writing a tombstone, as Put writes a
// value, with the same errors: the object stays, with Delete's token and no
// value.
func (s *Store) Delete(ctx context.Context, key string, token fence.Token) error {
	return s.write(ctx, "delete", key, nil, token, true)
}

// Highest implements [storage.Store]: one HEAD. A key with no object has
// fence.None; an object this package did not write is [ErrForeign].
func (s *Store) Highest(ctx context.Context, key string) (fence.Token, error) {
	if err := checkKey(key); err != nil {
		return fence.None, err
	}
	if err := ctxerr.Of(ctx); err != nil {
		return fence.None, err
	}
	cur, err := s.head(ctx, s.name(key))
	if err != nil {
		return fence.None, s.fail(ctx, "highest", key, err)
	}
	return cur.token, nil
}

// current is what a read found: no object (etag nil), or its ETag and
// token. whole reports that the token is known to belong to the object of
// that ETag.
type current struct {
	etag  *string
	token fence.Token
	md5   string // the body's MD5 its write recorded, unique to that write
	whole bool
}

// current returns the object's ETag and token as one write left them.
//
// A server may read an object's metadata and its ETag at two moments (the
// posix backend of versitygw reads them from the path one after the
// other), so one HEAD can pair a new ETag with an older write's token, and
// an If-Match on that ETag would then let a stale token overwrite a newer
// one. The metadata therefore carries the MD5 of the body, which is the
// ETag of a plain PUT: a HEAD whose ETag is that MD5 is whole. Otherwise
// (a torn read, or a server whose ETags are not MD5s) a second HEAD that
// sees the same ETag is whole: that object was current from the first
// HEAD's ETag to the second's, and ETags are unique per write.
func (s *Store) current(ctx context.Context, name string) (current, error) {
	cur, err := s.head(ctx, name)
	// At least one confirming read, whatever WithMaxAttempts says: on a
	// server whose ETags are not MD5s every read needs one.
	for n := 1; err == nil && !cur.whole; n++ {
		if n >= max(2, s.cfg.maxAttempts) {
			return current{}, fmt.Errorf("%w: object %s changed between every two of %d reads", ErrContended, name, n)
		}
		var next current
		next, err = s.head(ctx, name)
		if next.etag != nil && cur.etag != nil && *next.etag == *cur.etag {
			next.whole = true
		}
		cur = next
	}
	return cur, err
}

func (s *Store) head(ctx context.Context, name string) (current, error) {
	out, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &name})
	if err != nil {
		if status(err) == http.StatusNotFound {
			return current{whole: true}, nil
		}
		return current{}, err
	}
	tok, _, err := parseMeta(out.Metadata)
	if err != nil || out.ETag == nil || aws.ToInt64(out.ContentLength) < nonceLen {
		return current{}, fmt.Errorf("object %s: %w", name, ErrForeign)
	}
	whole := strings.Trim(*out.ETag, `"`) == out.Metadata[metaMD5]
	return current{etag: out.ETag, token: tok, md5: out.Metadata[metaMD5], whole: whole}, nil
}

func (s *Store) write(ctx context.Context, op, key string, value []byte, token fence.Token, deleted bool) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if token == fence.None {
		return fmt.Errorf("s3store: %s %q: %w", op, key, fence.ErrNoToken)
	}
	if err := ctxerr.Of(ctx); err != nil {
		return err
	}
	name := s.name(key)
	body := make([]byte, nonceLen+len(value))
	_, _ = rand.Read(body[:nonceLen])
	copy(body[nonceLen:], value)
	sum := md5.Sum(body)
	meta := map[string]string{
		metaMD5:   hex.EncodeToString(sum[:]),
		metaToken: token.String(),
		metaKey:   base64.StdEncoding.EncodeToString([]byte(key)),
	}
	if deleted {
		meta[metaDeleted] = "true"
	}
	var lost error
	for attempt := 1; attempt <= s.cfg.maxAttempts+1; attempt++ {
		cur, err := s.current(ctx, name)
		if err != nil {
			return s.fail(ctx, op, key, err)
		}
		if cur.md5 == meta[metaMD5] {
			// This call's own write, which an earlier round (or the SDK's
			// re-sending of one whose reply was lost) applied: the nonce
			// makes its MD5 unique, so nobody wrote since.
			s.tell(attempt)
			return nil
		}
		if attempt > s.cfg.maxAttempts {
			break // the read after the last lost round found another write
		}
		in := &s3.PutObjectInput{
			Bucket:        &s.bucket,
			Key:           &name,
			Body:          bytes.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))),
			Metadata:      meta,
		}
		if cur.etag == nil {
			in.IfNoneMatch = aws.String("*")
		} else {
			if err := fence.Check(cur.token, token); err != nil {
				s.tell(attempt)
				return fmt.Errorf("s3store: %s %q: %w", op, key, err)
			}
			in.IfMatch = cur.etag
		}
		if s.cfg.unconditional {
			in.IfMatch, in.IfNoneMatch = nil, nil
		}
		_, err = s.c.PutObject(ctx, in)
		if err == nil {
			s.tell(attempt)
			return nil
		}
		if !conflict(err, in.IfMatch != nil) || ctx.Err() != nil {
			return s.fail(ctx, op, key, err)
		}
		lost = err
		if err := backoff(ctx, attempt); err != nil {
			return s.fail(ctx, op, key, err)
		}
	}
	return fmt.Errorf("s3store: %s %q: %w: lost %d rounds, the last with %w", op, key, ErrContended, s.cfg.maxAttempts, lost)
}

// backoff waits after a write's attempt-th lost round: a random time
// below 2^(attempt-1) ms, at most 64 ms, so that writers that keep
// colliding on one object spread out instead of colliding again at once.
func backoff(ctx context.Context, attempt int) error {
	d := time.Duration(mrand.Int64N(int64(time.Millisecond) << min(attempt-1, 6)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctxerr.Of(ctx)
	case <-t.C:
		return nil
	}
}

func (s *Store) tell(attempts int) {
	if s.cfg.attempts != nil {
		s.cfg.attempts(attempts)
	}
}

// fail wraps a backend error, with the context's error and cause if the
// context has ended.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	return ctxerr.With(ctx, fmt.Errorf("s3store: %s %q: %w", op, key, err))
}

// parseMeta reads an object's token and tombstone mark, and checks that it
// has the MD5 every write records. S3 hands metadata names back in lower
// case, as they are written.
func parseMeta(m map[string]string) (fence.Token, bool, error) {
	if sum, err := hex.DecodeString(m[metaMD5]); err != nil || len(sum) != md5.Size {
		return fence.None, false, errors.New("no valid " + metaMD5)
	}
	tok, err := fence.Parse(m[metaToken])
	if err != nil {
		return fence.None, false, err
	}
	if tok == fence.None {
		return fence.None, false, fence.ErrNoToken
	}
	return tok, m[metaDeleted] == "true", nil
}

// conflict reports whether a PUT lost to another writer: 412 Precondition
// Failed (the ETag changed, or an object appeared under If-None-Match: *),
// 409 ConditionalRequestConflict (S3 was applying a competing write), or,
// for a PUT with If-Match (ifMatch), 404 NoSuchKey (the object it read was
// removed since: the next round writes with If-None-Match).
func conflict(err error, ifMatch bool) bool {
	c := code(err)
	return status(err) == http.StatusPreconditionFailed || c == "PreconditionFailed" || c == "ConditionalRequestConflict" ||
		ifMatch && (c == "NoSuchKey" || status(err) == http.StatusNotFound)
}

// code returns the S3 error code in err, or "".
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// status returns the HTTP status of the response err reports, or 0.
func status(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}
