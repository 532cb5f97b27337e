package s3store_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/redfence/redfence/internal/testkit/netfault"
	"github.com/redfence/redfence/storage"
	"github.com/redfence/redfence/storage/s3store"
	"github.com/redfence/redfence/storage/storagetest"
)

// newStore returns a Store on a bucket of the test's own.
func newStore(t *testing.T, opts ...s3store.Option) *s3store.Store {
	t.Helper()
	return storeOn(t, client(t, nil, 0), bucket(t), opts...)
}

func storeOn(t testing.TB, c *s3.Client, bucket string, opts ...s3store.Option) *s3store.Store {
	t.Helper()
	s, err := s3store.New(c, bucket, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	endpoint(t) // skip the whole suite, not each subtest, without a server
	storagetest.Run(t, func(t *testing.T) storage.Store { return newStore(t) },
		storagetest.WithFault(func(t *testing.T) storagetest.Fault {
			// The server becomes unreachable: a proxy in front of it
			// resets every connection and refuses new ones.
			raw, access, secret := endpoint(t)
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			proxy, err := netfault.New(u.Host)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			b := bucket(t)
			// One attempt per request: the SDK's retries of a refused
			// connection would only make the broken calls slower.
			viaProxy := clientOf("http://"+proxy.Addr(), access, secret, nil, 1)
			return storagetest.Fault{
				Store: storeOn(t, viaProxy, b),
				Break: func() {
					proxy.RefuseNew(true)
					proxy.ResetAll()
				},
				Reopen: func(t *testing.T) storage.Store { return storeOn(t, client(t, nil, 0), b) },
			}
		}),
	)
}

// plantedVar, set in a child test process, makes TestPlanted run the
// conformance suite's concurrency check on a store whose writes ignore the
// ETag.
const plantedVar = "REDFENCE_S3_PLANTED"

// TestPlanted is the child's half of TestPlantedStoreIsCaught.
func TestPlanted(t *testing.T) {
	if os.Getenv(plantedVar) != "1" {
		return // run by TestPlantedStoreIsCaught, in a child process
	}
	storagetest.Run(t, func(t *testing.T) storage.Store { return newStore(t, s3store.WithUnconditional()) })
}

// A store whose writes are plain PUTs (the HEAD's check, then a write that
// does not name the ETag it checked) lets a stale writer overwrite a newer
// value; the conformance suite's concurrency check must see it. It runs in
// a child process, since the failure it expects would fail this test.
func TestPlantedStoreIsCaught(t *testing.T) {
	url, access, secret := endpoint(t)
	var failed bool
	var out []byte
	// The race is likely but not certain in one run: three tries.
	for try := 0; try < 3 && !failed; try++ {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestPlanted$/^Concurrent$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), plantedVar+"=1", endpointVar+"="+url, accessVar+"="+access, secretVar+"="+secret)
		cmd.WaitDelay = time.Second
		var err error
		out, err = cmd.CombinedOutput()
		cancel()
		if !strings.Contains(string(out), "=== RUN   TestPlanted/Concurrent") {
			t.Fatalf("the child did not run the concurrency check (%v):\n%s", err, out)
		}
		failed = err != nil
	}
	if !failed {
		t.Fatalf("the concurrency check passed a store whose writes ignore the ETag:\n%s", out)
	}
	caught := false
	for _, msg := range []string{"stale write accepted", "reader saw token", "want \"", "Highest("} {
		caught = caught || strings.Contains(string(out), msg)
	}
	if !caught {
		t.Fatalf("the child failed, but not on the fencing rule:\n%s", out)
	}
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "concurrent.go") || strings.Contains(line, "helpers.go") {
			t.Logf("caught: %s", strings.TrimSpace(line))
			break
		}
	}
}
