package history_test

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/jepsen/internal/history"
)

func fenceToken(t uint64) fence.Token { return fence.Token(t) }

func put(t uint64, v string) history.Put {
	return history.Put{Key: "k", Token: fenceToken(t), Value: v}
}
func del(t uint64) history.Delete { return history.Delete{Key: "k", Token: fenceToken(t)} }
func read(v string, t uint64) history.GetResult {
	return history.GetResult{Found: true, Value: v, Token: fenceToken(t)}
}

var (
	get      = history.Get{Key: "k"}
	highest  = history.Highest{Key: "k"}
	accepted = history.WriteResult{Accepted: true}
	stale    = history.WriteResult{}
	notFound = history.GetResult{}
)

func top(t uint64) history.HighestResult { return history.HighestResult{Token: fenceToken(t)} }

func TestRegisterModelAcceptsCorrectHistories(t *testing.T) {
	for name, h := range map[string][]porcupine.Operation{
		"fenced writes": seq(
			get, notFound, highest, top(0),
			put(2, "a"), accepted, put(2, "b"), accepted, put(1, "c"), stale,
			get, read("b", 2), del(3), accepted, put(2, "d"), stale,
			get, notFound, highest, top(3), put(5, "e"), accepted, get, read("e", 5)),
		"concurrent writes, either order": ops(
			step{client: 0, call: 0, ret: 10, in: put(1, "a"), out: stale},
			step{client: 1, call: 1, ret: 9, in: put(2, "b"), out: accepted},
			step{client: 2, call: 11, ret: 12, in: get, out: read("b", 2)}),
		"unknown write seen": ops(
			step{client: 0, call: 0, in: put(1, "a"), out: history.Unknown},
			step{client: 1, call: 5, ret: 6, in: get, out: read("a", 1)}),
		"unknown write never seen": ops(
			step{client: 0, call: 0, in: put(9, "a"), out: history.Unknown},
			step{client: 1, call: 5, ret: 6, in: put(2, "b"), out: accepted},
			step{client: 1, call: 7, ret: 8, in: get, out: read("b", 2)}),
		"unknown read": ops(
			step{client: 0, call: 0, in: get, out: history.Unknown}),
	} {
		t.Run(name, func(t *testing.T) {
			if v := verdict(history.RegisterModel(), h); v != porcupine.Ok {
				t.Fatalf("verdict %s, want Ok", v)
			}
		})
	}
}

func TestRegisterModelRejectsBrokenStores(t *testing.T) {
	for name, h := range map[string][]porcupine.Operation{
		"stale write accepted":              seq(put(2, "a"), accepted, put(1, "b"), accepted),
		"stale write visible":               seq(put(2, "a"), accepted, put(1, "b"), stale, get, read("b", 1)),
		"equal token refused":               seq(put(2, "a"), accepted, put(2, "b"), stale),
		"delete forgets the highest":        seq(put(2, "a"), accepted, del(3), accepted, put(2, "b"), accepted),
		"lost write":                        seq(put(1, "a"), accepted, get, notFound),
		"stale read":                        seq(put(1, "a"), accepted, put(2, "b"), accepted, get, read("a", 1)),
		"highest raised by a refused write": seq(put(2, "a"), accepted, put(1, "b"), stale, highest, top(1)),
		"unknown stale write seen": ops(
			step{client: 0, call: 0, ret: 1, in: put(5, "a"), out: accepted},
			step{client: 1, call: 2, in: put(4, "b"), out: history.Unknown},
			step{client: 0, call: 3, ret: 4, in: get, out: read("b", 4)}),
	} {
		t.Run(name, func(t *testing.T) {
			if v := verdict(history.RegisterModel(), h); v != porcupine.Illegal {
				t.Fatalf("verdict %s, want Illegal", v)
			}
		})
	}
}
