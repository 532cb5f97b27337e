package scripts_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/scripts"
)

// decodeReply builds a RESP-like value (nil, int64, string or array) from
// fuzz bytes, so the parsers meet every shape a broken or hostile server
// could send.
func decodeReply(b []byte, depth int) (any, []byte) {
	if len(b) == 0 {
		return nil, b
	}
	tag, b := b[0], b[1:]
	switch tag % 4 {
	case 0:
		return nil, b
	case 1:
		var buf [8]byte
		n := copy(buf[:], b)
		return int64(binary.LittleEndian.Uint64(buf[:])) >> (tag / 4 % 64), b[n:]
	case 2:
		n := 0
		if len(b) > 0 {
			n, b = int(b[0]%24), b[1:]
		}
		n = min(n, len(b))
		return string(b[:n]), b[n:]
	default:
		if depth > 2 {
			return nil, b
		}
		n := int(tag/4) % 7
		a := make([]any, 0, n)
		for range n {
			var v any
			v, b = decodeReply(b, depth+1)
			a = append(a, v)
		}
		return a, b
	}
}

func FuzzParseReplies(f *testing.F) {
	f.Add([]byte{3 + 4*3, 1, 1, 1, 2, 1, 1})
	f.Add([]byte{3 + 4*5, 2, 1, 'o', 2, 1, '1', 2, 1, '7', 1, 100, 2, 2, '1', '2'})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	// A reentry refused as too deep: {2, token, depth} (found by CI's fuzzing,
	// when the check above still expected every refusal to carry no token).
	f.Add([]byte{3 + 4*3, 1, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0x03, 0xa0, 0x4c, 0x6e, 0x03, 0x03, 0, 0, 1, 0x03, 0x03, 0x03, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, _ := decodeReply(b, 0)
		if a, err := scripts.ParseAcquire(v); err == nil {
			if _, scalar := v.([]any); !scalar && !(a.OK && a.Depth == 1 && a.Token > 0) {
				t.Fatalf("acquire %#v parsed to %+v: a scalar is a fresh take", v, a)
			}
			if a.OK && (a.Token == 0 || a.Depth < 1) {
				t.Fatalf("acquire %#v parsed to %+v", v, a)
			}
			if a.OK && a.TooDeep {
				t.Fatalf("acquire %#v parsed to %+v: both granted and refused", v, a)
			}
			if a.TooDeep && (a.Token == 0 || a.Depth < 1 || a.HolderTTL != 0) {
				t.Fatalf("acquire %#v parsed to %+v", v, a)
			}
			if !a.OK && !a.TooDeep && (a.Token != 0 || a.Depth != 0 || a.HolderTTL < -1) {
				t.Fatalf("acquire %#v parsed to %+v", v, a)
			}
		}
		if r, err := scripts.ParseRelease(v, 7); err == nil && (r.Depth < -1 || r.Depth >= 0 && (r.Free || r.Forced != nil) || r.Free && r.Forced != nil) {
			t.Fatalf("release %#v parsed to %+v", v, r)
		}
		if r, err := scripts.ParseExtend(v, 7); err == nil {
			n, isInt := v.(int64)
			a, isList := v.([]any)
			switch {
			case isInt && (n == 0 || n == 1) && r.Held == (n == 1) && r.Forced == nil:
			case isList && len(a) == 3 && !r.Held && r.Forced != nil && r.Forced.Token == 7 && r.Forced.By == a[1]:
			default:
				t.Fatalf("extend %#v parsed to %+v", v, r)
			}
		}
		if s, err := scripts.ParseInspect(v); err == nil {
			if (s.Owner == "") != (s.Token == 0) || (s.Owner == "") != (s.Depth == 0) || s.Depth < 0 {
				t.Fatalf("inspect %#v parsed to inconsistent %+v", v, s)
			}
		}
	})
}

func TestParseRejectsMalformed(t *testing.T) {
	for _, v := range []any{nil, "x", "0", "01", int64(0), []any{int64(1)}, []any{int64(1), int64(0), int64(1)},
		[]any{int64(1), int64(3), int64(0)}, []any{int64(2), int64(0), int64(1)}, []any{int64(0), int64(-3), int64(0)},
		[]any{"1", int64(1), int64(1)}} {
		_, err := scripts.ParseAcquire(v)
		require.ErrorIs(t, err, scripts.ErrReply, "%#v", v)
	}
	for _, v := range []any{nil, "0", int64(-3), []any{int64(-2), "ops", int64(5)}, []any{int64(-1), "ops"}} {
		_, err := scripts.ParseRelease(v, 7)
		require.ErrorIs(t, err, scripts.ErrReply, "%#v", v)
	}
	for v, want := range map[any]scripts.Released{int64(0): {}, int64(2): {Depth: 2}, int64(-1): {Depth: -1},
		int64(-2): {Depth: -1, Free: true}} {
		r, err := scripts.ParseRelease(v, 7)
		require.NoError(t, err)
		require.Equal(t, want, r, "%#v", v)
	}
	rel, err := scripts.ParseRelease([]any{int64(-1), "ops", int64(1700000000000)}, 7)
	require.NoError(t, err)
	require.Equal(t, scripts.Released{Depth: -1, Forced: &scripts.Forced{Token: 7, At: time.UnixMilli(1700000000000), By: "ops"}}, rel)
	for v, want := range map[any]fence.Token{int64(9): 9, "1796657228891001": 1796657228891001} {
		a, err := scripts.ParseAcquire(v)
		require.NoError(t, err)
		require.Equal(t, scripts.Acquired{OK: true, Token: want, Depth: 1}, a, "a fresh take's token alone")
	}
	for _, v := range []any{nil, int64(2), int64(-1), []any{int64(0), "ops"}, []any{int64(1), "ops", int64(5)},
		[]any{int64(0), int64(3), int64(5)}, []any{int64(0), "ops", "5"}} {
		_, err := scripts.ParseExtend(v, 7)
		require.ErrorIs(t, err, scripts.ErrReply, "%#v", v)
	}
	r, err := scripts.ParseExtend([]any{int64(0), "ops@bastion", int64(1700000000000)}, 7)
	require.NoError(t, err)
	require.Equal(t, scripts.ExtendReply{Forced: &scripts.Forced{Token: 7, At: time.UnixMilli(1700000000000), By: "ops@bastion"}}, r)
	valid := func(edit func([]any)) []any {
		v := []any{"o", "1", int64(5), int64(1), []any{"a"}, int64(0), "job 7", []any{"3", int64(1700000000000), "ops"}, int64(0)}
		edit(v)
		return v
	}
	_, err = scripts.ParseInspect(valid(func([]any) {}))
	require.NoError(t, err, "the base of the malformed replies below must parse")
	for _, v := range []any{nil, []any{}, valid(func(v []any) { v[1] = nil }),
		valid(func(v []any) { v[0], v[1], v[2] = nil, nil, int64(-9) }), valid(func(v []any) { v[4] = []any{} }),
		valid(func(v []any) { v[3] = "1" }), valid(func(v []any) { v[3] = int64(-1) }),
		valid(func(v []any) { v[1] = "0" }), valid(func(v []any) { v[4] = []any{int64(1)} }),
		valid(func(v []any) { v[0], v[1] = nil, nil }), valid(func(v []any) { v[2] = int64(-3) }),
		valid(func(v []any) { v[5] = int64(-1) }), valid(func(v []any) { v[5] = "1" }),
		valid(func(v []any) { v[6] = int64(1) }), valid(func(v []any) { v[7] = "3" }),
		valid(func(v []any) { v[7] = []any{"3", int64(1)} }), valid(func(v []any) { v[7] = []any{"0", int64(1), "ops"} }),
		valid(func(v []any) { v[7] = []any{"3", "1", "ops"} }), valid(func(v []any) { v[7] = []any{"3", int64(1), int64(2)} }),
		valid(func(v []any) { v[0], v[1], v[2], v[4] = nil, nil, int64(-2), []any{} }),
		valid(func(v []any) { v[8] = int64(-1) }), valid(func(v []any) { v[8] = "1" }),
		[]any{"o", "1", int64(5), int64(1), []any{"a"}, int64(0), nil, nil}} {
		_, err := scripts.ParseInspect(v)
		require.True(t, errors.Is(err, scripts.ErrReply), "%#v: %v", v, err)
	}
}

// Found by fuzzing: a PTTL beyond what a Duration holds must not wrap.
func TestHugePTTLSaturates(t *testing.T) {
	a, err := scripts.ParseAcquire([]any{int64(0), int64(847736400446211), int64(0)})
	require.NoError(t, err)
	require.Greater(t, a.HolderTTL, 100*365*24*time.Hour)
	a, err = scripts.ParseAcquire([]any{int64(2), int64(7), int64(3)})
	require.NoError(t, err)
	require.Equal(t, scripts.Acquired{TooDeep: true, Token: 7, Depth: 3}, a)
	a, err = scripts.ParseAcquire([]any{int64(0), int64(847736400446211), int64(0)})
	require.NoError(t, err)
	require.Greater(t, a.HolderTTL, 100*365*24*time.Hour)
	s, err := scripts.ParseInspect([]any{"o", "1", int64(1 << 62), int64(1), []any{"a"}, int64(0), nil, nil, int64(0)})
	require.NoError(t, err)
	require.Greater(t, s.TTL, 100*365*24*time.Hour)
}
