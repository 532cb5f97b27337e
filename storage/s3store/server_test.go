package s3store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/redfence/redfence/internal/testkit/testenv"
)

// The S3 server the tests use: a running one named by endpointVar, or one
// started from the versitygw binary named by gatewayVar.
const (
	endpointVar = "REDFENCE_S3_ENDPOINT"   // e.g. http://127.0.0.1:7070
	accessVar   = "REDFENCE_S3_ACCESS_KEY" // default "redfence"
	secretVar   = "REDFENCE_S3_SECRET_KEY" // default "redfence-secret"
	gatewayVar  = "REDFENCE_S3_GATEWAY"    // path of a versitygw binary
)

func TestMain(m *testing.M) {
	code := testenv.Run(m)
	gw.stop()
	os.Exit(code)
}

// gateway is the versitygw this test binary started, shared by its tests
// and stopped by TestMain.
type gateway struct {
	once     sync.Once
	cmd      *exec.Cmd
	dir      string
	endpoint string
	err      error
}

var gw gateway

func (g *gateway) start(bin, access, secret string) {
	g.once.Do(func() {
		g.dir, g.err = os.MkdirTemp("", "redfence-s3store-")
		if g.err != nil {
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			g.err = err
			return
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		g.cmd = exec.Command(bin, "--access", access, "--secret", secret, "--port", addr, "posix", g.dir)
		g.cmd.SysProcAttr = sysProcAttr()
		if g.err = g.cmd.Start(); g.err != nil {
			return
		}
		exited := make(chan error, 1)
		go func() { exited <- g.cmd.Wait() }()
		g.endpoint = "http://" + addr
		deadline := time.Now().Add(15 * time.Second)
		for {
			// Any HTTP answer (403 for an unsigned request) means it serves.
			resp, err := http.Get(g.endpoint + "/")
			if err == nil {
				_ = resp.Body.Close()
				return
			}
			select {
			case err := <-exited:
				g.err = fmt.Errorf("%s exited before serving: %v", bin, err)
				return
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				g.err = fmt.Errorf("%s did not answer on %s within 15s", bin, addr)
				return
			}
		}
	})
}

// stop kills the gateway by its PID, if one was started.
func (g *gateway) stop() {
	if g.cmd != nil && g.cmd.Process != nil {
		_ = g.cmd.Process.Kill()
	}
	if g.dir != "" {
		_ = os.RemoveAll(g.dir)
	}
}

// env returns the variable's value, or def.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// endpoint returns the S3 server's URL and credentials: REDFENCE_S3_ENDPOINT,
// else a versitygw started from REDFENCE_S3_GATEWAY. Without either it
// skips, or fails under CI.
func endpoint(t testing.TB) (url, access, secret string) {
	t.Helper()
	access, secret = env(accessVar, "redfence"), env(secretVar, "redfence-secret")
	if url := os.Getenv(endpointVar); url != "" {
		return url, access, secret
	}
	bin := os.Getenv(gatewayVar)
	if bin == "" {
		testenv.Missing(t, gatewayVar,
			fmt.Sprintf("neither %s nor %s is set: CI must run every S3 test", endpointVar, gatewayVar),
			fmt.Sprintf("skipping S3 test: set %s (a running server) or %s (a versitygw binary to start)", endpointVar, gatewayVar))
		return
	}
	gw.start(bin, access, secret)
	if gw.err != nil {
		testenv.Missing(t, gatewayVar,
			fmt.Sprintf("%s=%s: cannot start the gateway: %v", gatewayVar, bin, gw.err),
			fmt.Sprintf("skipping S3 test: %s=%s cannot start: %v", gatewayVar, bin, gw.err))
		return
	}
	return gw.endpoint, access, secret
}

// counter is an http.RoundTripper that counts the requests it forwards, per
// method, and can fail them instead (fail returns a non-nil response or
// error to answer with).
type counter struct {
	next  http.RoundTripper
	n     sync.Map // method -> *atomic.Int64
	total atomic.Int64
	hook  atomic.Pointer[func(*http.Request) (*http.Response, error)]
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	v, _ := c.n.LoadOrStore(r.Method, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	c.total.Add(1)
	if h := c.hook.Load(); h != nil {
		if resp, err := (*h)(r); resp != nil || err != nil {
			return resp, err
		}
	}
	return c.next.RoundTrip(r)
}

// count returns the requests of method made so far.
func (c *counter) count(method string) int64 {
	if v, ok := c.n.Load(method); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// transport is an HTTP transport that keeps enough idle connections for
// the tests' writers.
func transport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return tr
}

// client returns an S3 client of the server, path-style, through rt (a
// fresh transport when nil), with retries attempts per request (the SDK's
// default when 0).
func client(t testing.TB, rt http.RoundTripper, retries int) *s3.Client {
	t.Helper()
	url, access, secret := endpoint(t)
	return clientOf(url, access, secret, rt, retries)
}

func clientOf(url, access, secret string, rt http.RoundTripper, retries int) *s3.Client {
	if rt == nil {
		rt = transport()
	}
	return s3.New(s3.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(access, secret, ""),
		HTTPClient:       &http.Client{Transport: rt},
		RetryMaxAttempts: retries,
	})
}

// bucket creates a bucket of a name no other test uses, emptied and
// removed when the test ends.
func bucket(t testing.TB) string {
	t.Helper()
	c := client(t, nil, 0)
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "redfence-test-" + hex.EncodeToString(b)
	if _, err := c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	t.Cleanup(func() { removeBucket(t, c, name) })
	return name
}

func removeBucket(t testing.TB, c *s3.Client, name string) {
	ctx := context.Background()
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &name})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Logf("cleanup of bucket %s: %v", name, err)
			return
		}
		for _, o := range page.Contents {
			if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &name, Key: o.Key}); err != nil {
				t.Logf("cleanup of bucket %s: %v", name, err)
				return
			}
		}
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &name}); err != nil {
		t.Logf("cleanup of bucket %s: %v", name, err)
	}
}
