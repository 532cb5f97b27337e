package s3store_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/s3store"
)

// counted returns a Store on a bucket of the test's own whose requests go
// through the returned counter.
func counted(t *testing.T, opts ...s3store.Option) (*s3store.Store, *counter, *s3.Client, string) {
	t.Helper()
	c := &counter{next: transport()}
	cl := client(t, c, 0)
	b := bucket(t)
	return storeOn(t, cl, b, opts...), c, cl, b
}

func objectName(t *testing.T, s *s3store.Store, key string) string {
	t.Helper()
	name, err := s.ObjectName(key)
	require.NoError(t, err)
	return name
}

func TestNewInvalid(t *testing.T) {
	c := s3.New(s3.Options{Region: "us-east-1"})
	for name, f := range map[string]func() (*s3store.Store, error){
		"nil client":    func() (*s3store.Store, error) { return s3store.New(nil, "b") },
		"empty bucket":  func() (*s3store.Store, error) { return s3store.New(c, "") },
		"nil option":    func() (*s3store.Store, error) { return s3store.New(c, "b", nil) },
		"invalid UTF-8": func() (*s3store.Store, error) { return s3store.New(c, "b", s3store.WithPrefix("a\xff")) },
		"long prefix": func() (*s3store.Store, error) {
			return s3store.New(c, "b", s3store.WithPrefix(strings.Repeat("p", 961)))
		},
		"zero attempts":   func() (*s3store.Store, error) { return s3store.New(c, "b", s3store.WithMaxAttempts(0)) },
		"negative rounds": func() (*s3store.Store, error) { return s3store.New(c, "b", s3store.WithMaxAttempts(-1)) },
	} {
		s, err := f()
		require.ErrorIs(t, err, storage.ErrInvalid, name)
		require.Nil(t, s, name)
	}
	s, err := s3store.New(c, "b", s3store.WithPrefix(strings.Repeat("p", 960)))
	require.NoError(t, err)
	require.Len(t, objectName(t, s, strings.Repeat("\xff", storage.MaxKeyLen)), 1024, "the longest prefix fills S3's limit exactly")

	s, err = s3store.New(c, "b")
	require.NoError(t, err)
	sum := sha256.Sum256([]byte("orders/42"))
	require.Equal(t, s3store.DefaultPrefix+hex.EncodeToString(sum[:]), objectName(t, s, "orders/42"),
		"the documented mapping: prefix + hex SHA-256 of the key")
	for _, key := range []string{"", strings.Repeat("k", storage.MaxKeyLen+1)} {
		_, err := s.ObjectName(key)
		require.ErrorIs(t, err, storage.ErrInvalid)
	}
}

// Every key, NUL bytes, invalid UTF-8 and the longest included, is one
// object with a name S3 takes, and the object says which key it holds.
func TestObjectNames(t *testing.T) {
	s, _, cl, b := counted(t, s3store.WithPrefix("app/"))
	keys := []string{"\x00", "a\x00b", "\xff\xfe", "../..", "/", strings.Repeat("\xff", storage.MaxKeyLen), "日本語"}
	names := map[string]string{}
	for i, key := range keys {
		require.NoError(t, s.Put(t.Context(), key, []byte{byte(i)}, fence.Token(i+1)))
		name := objectName(t, s, key)
		require.True(t, utf8.ValidString(name) && len(name) <= 1024 && strings.HasPrefix(name, "app/"), name)
		names[name] = key
	}
	out, err := cl.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: &b, Prefix: aws.String("app/")})
	require.NoError(t, err)
	require.Len(t, out.Contents, len(keys), "one object per key")
	for _, o := range out.Contents {
		key, ok := names[*o.Key]
		require.True(t, ok, "object %s is no key's", *o.Key)
		h, err := cl.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: &b, Key: o.Key})
		require.NoError(t, err)
		got, err := base64.StdEncoding.DecodeString(h.Metadata["redfence-key"])
		require.NoError(t, err)
		require.Equal(t, key, string(got), "redfence-key maps the object back to its key")
	}
}

// Delete leaves a tombstone: the object stays with the Delete's token, so
// a late writer's Put cannot bring the key back.
func TestTombstone(t *testing.T) {
	s, _, cl, b := counted(t)
	ctx := t.Context()
	require.NoError(t, s.Put(ctx, "k", []byte("v"), 5))
	require.NoError(t, s.Delete(ctx, "k", 8))
	h, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: aws.String(objectName(t, s, "k"))})
	require.NoError(t, err)
	require.Equal(t, "true", h.Metadata["redfence-deleted"])
	require.Equal(t, "8", h.Metadata["redfence-token"])

	err = s.Put(ctx, "k", []byte("zombie"), 6)
	var se *fence.StaleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, fence.StaleError{Token: 6, Highest: 8}, *se)
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, storage.ErrNotFound)
	tok, err := s.Highest(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, fence.Token(8), tok)
}

// Two writes of the same value (two tombstones here) have ETags of their
// own, so a writer whose If-Match names the older one loses to the newer.
func TestSameValueNewETag(t *testing.T) {
	s, c, _, _ := counted(t)
	ctx := t.Context()
	require.NoError(t, s.Delete(ctx, "k", 5))
	var once atomic.Bool
	hook := func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPut && once.CompareAndSwap(false, true) {
			// Between the stale writer's HEAD and its PUT, a newer
			// holder deletes the key too: the same empty value.
			require.NoError(t, s.Delete(ctx, "k", 8))
		}
		return nil, nil
	}
	c.hook.Store(&hook)
	var se *fence.StaleError
	require.ErrorAs(t, s.Delete(ctx, "k", 6), &se)
	require.Equal(t, fence.StaleError{Token: 6, Highest: 8}, *se)
	c.hook.Store(nil)
	tok, err := s.Highest(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, fence.Token(8), tok)
}

// A HEAD that pairs the current object's ETag with an older write's
// metadata (versitygw's posix backend reads them one after the other) is
// told apart, and does not let a stale token through.
func TestTornHead(t *testing.T) {
	s, c, cl, b := counted(t)
	ctx := t.Context()
	name := objectName(t, s, "k")
	require.NoError(t, s.Put(ctx, "k", []byte("old"), 5))
	old, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b, Key: &name})
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "k", []byte("new"), 9))

	var torn atomic.Int32
	hook := func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodHead || torn.Add(1) > 1 {
			return nil, nil
		}
		resp, err := c.next.RoundTrip(r)
		if err == nil {
			for k, v := range old.Metadata {
				resp.Header.Set("X-Amz-Meta-"+k, v)
			}
		}
		return resp, err
	}
	c.hook.Store(&hook)
	heads := c.count(http.MethodHead)
	var se *fence.StaleError
	require.ErrorAs(t, s.Put(ctx, "k", []byte("stale"), 7), &se)
	require.Equal(t, fence.StaleError{Token: 7, Highest: 9}, *se)
	require.EqualValues(t, 2, c.count(http.MethodHead)-heads, "a torn HEAD is confirmed by a second")
	c.hook.Store(nil)
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, storage.Record{Value: []byte("new"), Token: 9}, rec)
}

// A write that loses every round gives up after WithMaxAttempts rounds
// with ErrContended, holding the server's last 412.
//
// (TestLostReplyFindsItsWrite: the write whose PUT was applied but whose
// reply was lost finds itself on the next read, and succeeds.)
func TestRetryBound(t *testing.T) {
	s, c, _, _ := counted(t, s3store.WithMaxAttempts(3))
	hook := func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPut {
			return nil, nil
		}
		_, _ = io.Copy(io.Discard, r.Body)
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code>` +
			`<Message>At least one of the pre-conditions you specified did not hold</Message></Error>`
		return &http.Response{
			StatusCode: http.StatusPreconditionFailed, Status: "412 Precondition Failed",
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		}, nil
	}
	c.hook.Store(&hook)
	err := s.Put(t.Context(), "k", []byte("v"), 1)
	require.ErrorIs(t, err, s3store.ErrContended)
	var ae smithy.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "PreconditionFailed", ae.ErrorCode())
	require.EqualValues(t, 3, c.count(http.MethodPut))
	// A HEAD a round, and one after the last, which would have found the
	// write in place had a lost reply hidden that it was applied.
	require.EqualValues(t, 4, c.count(http.MethodHead))
	t.Logf("the error: %v", err)
}

// An object this package did not write is refused, never taken as a value.
func TestForeignObject(t *testing.T) {
	s, _, cl, b := counted(t)
	ctx := t.Context()
	_, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: &b, Key: aws.String(objectName(t, s, "k")), Body: bytes.NewReader([]byte("hand-made object"))})
	require.NoError(t, err)
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, s3store.ErrForeign)
	_, err = s.Highest(ctx, "k")
	require.ErrorIs(t, err, s3store.ErrForeign)
	require.ErrorIs(t, s.Put(ctx, "k", []byte("v"), 1), s3store.ErrForeign)
	require.ErrorIs(t, s.Delete(ctx, "k", 1), s3store.ErrForeign)
}

// The SDK's errors stay in the chain.
func TestErrorsWrapTheSDKs(t *testing.T) {
	s := storeOn(t, client(t, nil, 0), "redfence-no-such-bucket")
	var ae smithy.APIError
	err := s.Put(t.Context(), "k", []byte("v"), 1)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "NoSuchBucket", ae.ErrorCode())
	_, err = s.Get(t.Context(), "k")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "NoSuchBucket", ae.ErrorCode())
	require.False(t, errors.Is(err, storage.ErrNotFound), "a missing bucket is not a missing key")
}

// A PUT applied whose reply is lost (here: the server's answer replaced by
// a 500, and the SDK's retry refused with 412 since the object changed)
// is found by the next read: the write succeeds, once, and the object is
// its own; even with WithMaxAttempts(1), where a lost round would
// otherwise end in ErrContended.
func TestLostReplyFindsItsWrite(t *testing.T) {
	s, c, _, _ := counted(t, s3store.WithMaxAttempts(1))
	var puts atomic.Int64
	hook := func(r *http.Request) (*http.Response, error) {
		if r.Method != http.MethodPut || puts.Add(1) != 1 {
			return nil, nil
		}
		// Forward the first PUT, then lose its reply.
		resp, err := transport().RoundTrip(r)
		if err != nil {
			return nil, err
		}
		_ = resp.Body.Close()
		return nil, errors.New("connection reset (planted by the test)")
	}
	c.hook.Store(&hook)
	require.NoError(t, s.Put(t.Context(), "k", []byte("v"), 7))
	rec, err := s.Get(t.Context(), "k")
	require.NoError(t, err)
	require.Equal(t, "v", string(rec.Value))
	require.EqualValues(t, 7, rec.Token)
}
