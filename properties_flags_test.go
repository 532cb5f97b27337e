package redfence_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// withChecks runs f with rapid's case count multiplied by factor, so the
// CI run reaches the case totals the suite promises (1,000 per machine with
// the default -rapid.checks=100: 8x on miniredis, 2x on a real server, for
// example) while -rapid.checks still scales everything. REDFENCE_LONG=1
// multiplies by ten more.
func withChecks(t *testing.T, factor int, f func()) {
	t.Helper()
	fl := flag.Lookup("rapid.checks")
	old := fl.Value.String()
	base, err := strconv.Atoi(old)
	require.NoError(t, err)
	if os.Getenv("REDFENCE_LONG") == "1" {
		factor *= 10
	}
	require.NoError(t, flag.Set("rapid.checks", strconv.Itoa(base*factor)))
	defer func() { _ = flag.Set("rapid.checks", old) }()
	f()
}
