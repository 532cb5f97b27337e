package storagetest

import (
	"slices"
	"sort"
	"time"

	"github.com/redfence/redfence/fence"
)

// acceptedIndex answers "what is the highest token accepted by a write that
// had finished before time x?" for the history of one key.
type acceptedIndex struct {
	ends    []time.Time   // end times of accepted writes, ascending
	prefix  []fence.Token // prefix[i] = max token among ends[:i+1]
	byToken map[fence.Token]op
}

func newAcceptedIndex(writes []op) *acceptedIndex {
	var acc []op
	idx := &acceptedIndex{byToken: make(map[fence.Token]op)}
	for _, o := range writes {
		if o.accepted {
			acc = append(acc, o)
			idx.byToken[o.token] = o
		}
	}
	slices.SortFunc(acc, func(a, b op) int { return a.end.Compare(b.end) })
	var top fence.Token
	for _, o := range acc {
		top = max(top, o.token)
		idx.ends = append(idx.ends, o.end)
		idx.prefix = append(idx.prefix, top)
	}
	return idx
}

// maxEndedBefore returns the highest token among accepted writes that ended
// strictly before x, or None.
func (a *acceptedIndex) maxEndedBefore(x time.Time) fence.Token {
	i := sort.Search(len(a.ends), func(i int) bool { return !a.ends[i].Before(x) })
	if i == 0 {
		return fence.None
	}
	return a.prefix[i-1]
}

// expiringTimeout returns the i-th of a spread of short timeouts, from zero (already
// expired) to about 20ms, so some calls fail before sending, some while the
// backend works, and some succeed.
func expiringTimeout(i int) time.Duration { return time.Duration(i*i) * 50 * time.Microsecond }
