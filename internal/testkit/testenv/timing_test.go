package testenv_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

func TestAwait(t *testing.T) {
	n := 0
	require.True(t, testenv.Await(time.Minute, func() bool { n++; return n == 3 }))
	require.Equal(t, 3, n, "called until true, not after")
	start := time.Now()
	require.False(t, testenv.Await(20*time.Millisecond, func() bool { return false }))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "gives up only once its time is up")
}

// fatalTB records a Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper()                        {}
func (f *fatalTB) Fatalf(format string, a ...any) { f.msg = fmt.Sprintf(format, a...) }

func TestWithin(t *testing.T) {
	f := &fatalTB{TB: t}
	testenv.Within(f, time.Second+testenv.SchedulerSlack, time.Second, "x")
	require.Empty(t, f.msg, "the bound plus the slack is within")
	testenv.Within(f, time.Second+testenv.SchedulerSlack+time.Millisecond, time.Second, "x")
	require.Contains(t, f.msg, "x took", "beyond the bound plus the slack fails")
}
