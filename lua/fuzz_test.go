package lua_test

import (
	"encoding/binary"
	"testing"

	"github.com/redfence/redfence/lua"
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
	f.Fuzz(func(t *testing.T, b []byte) {
		v, _ := decodeReply(b, 0)
		if a, err := lua.ParseAcquire(v); err == nil {
			if a.OK && (a.Token == 0 || a.Depth < 1) {
				t.Fatalf("acquire %#v parsed to %+v", v, a)
			}
			if !a.OK && (a.Token != 0 || a.Depth != 0 || a.HolderTTL < -1) {
				t.Fatalf("acquire %#v parsed to %+v", v, a)
			}
		}
		if n, err := lua.ParseRelease(v); err == nil && n < -1 {
			t.Fatalf("release %#v parsed to %d", v, n)
		}
		_, _ = lua.ParseExtend(v)
		if s, err := lua.ParseInspect(v); err == nil {
			if (s.Owner == "") != (s.Token == 0) || (s.Owner == "") != (s.Depth == 0) || s.Depth < 0 {
				t.Fatalf("inspect %#v parsed to inconsistent %+v", v, s)
			}
		}
	})
}
