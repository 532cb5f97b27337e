//go:build unix

package reentrant_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redfence/redfence/internal/hashslot"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/redisproc"
	"github.com/redfence/redfence/lua"
	"github.com/redfence/redfence/reentrant"
)

// clusterNames returns n distinct names, the awkward ones for hash tags
// first: braces, '%', empty tags, unicode, bytes Redis does not care about.
func clusterNames(n int) []string {
	names := []string{"a{b}", "%7B", "{}", "x}y{", "{", "}", "%", "%%7D", "{a}{b}", "}{", "a b",
		"ключ", "名前", "🔒", "\x00", "\n", strings.Repeat("{}%", reentrant.MaxNameLen/3)}
	for i := len(names); i < n; i++ {
		switch i % 6 {
		case 0:
			names = append(names, fmt.Sprintf("{%d}", i))
		case 1:
			names = append(names, fmt.Sprintf("%%%d%%7D", i))
		case 2:
			names = append(names, fmt.Sprintf("%d}{", i))
		case 3:
			names = append(names, fmt.Sprintf("ü-%d", i))
		default:
			names = append(names, fmt.Sprintf("name-%d", i))
		}
	}
	return names
}

// A thousand names spread over every primary of a real cluster, each
// locked, inspected, reentered and unlocked through a ClusterClient.
func TestClusterThousandNames(t *testing.T) {
	c := redisproc.StartCluster(t, redisproc.ClusterConfig{})
	cc := c.Client()
	lc := newClient(t, cc)
	ctx := t.Context()
	names := clusterNames(1000)
	owner := map[int]*redisproc.Server{}
	perMaster := map[*redisproc.Server]int{}
	for _, name := range names {
		slot := hashslot.Of(lua.KeysFor(prefix, name).Lock)
		if owner[slot] == nil {
			owner[slot] = c.MasterOf(slot)
		}
		perMaster[owner[slot]]++
	}

	start := time.Now()
	work := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for name := range work {
				l, err := lc.Lock(ctx, name)
				if !assertNoErr(t, err) {
					continue
				}
				st, err := lc.Inspect(ctx, name)
				assertNoErr(t, err)
				assert.True(t, st.Held && st.Token == l.Token() && st.Depth == 1 && st.Owner == string(l.Owner()), "%q: %+v", name, st)
				inner, err := lc.Lock(l.Context(), name)
				if assertNoErr(t, err) {
					assert.Equal(t, l.Token(), inner.Token(), "%q: reentry keeps the token", name)
					assert.EqualValues(t, 2, inner.Depth())
					assertNoErr(t, inner.Unlock(ctx))
				}
				assertNoErr(t, l.Unlock(ctx))
				st, err = lc.Inspect(ctx, name)
				assertNoErr(t, err)
				assert.True(t, !st.Held && st.LastToken == l.Token(), "%q after unlock: %+v", name, st)
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	took := time.Since(start)

	var counts []string
	for i, m := range c.Masters() {
		n, err := m.Client().DBSize(ctx).Result()
		require.NoError(t, err)
		assert.Positive(t, perMaster[m], "primary %d got no name", i)
		assert.EqualValues(t, 2*perMaster[m], n, "primary %d keeps a hash and a counter per name, no queue", i)
		counts = append(counts, fmt.Sprint(perMaster[m]))
	}
	t.Logf("SUMMARY cluster-names names=%d masters=%d per_master=%s calls=%d took_ms=%d",
		len(names), len(perMaster), strings.Join(counts, "/"), 6*len(names), took.Milliseconds())
}
