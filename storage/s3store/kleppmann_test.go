package s3store_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// The worker process of TestPausedWorkerLateWriteRefused reads what to do
// from these variables.
const (
	workerVar       = "REDFENCE_S3_WORKER" // "1" in the worker
	workerBucketVar = "REDFENCE_S3_WORKER_BUCKET"
	workerNameVar   = "REDFENCE_S3_WORKER_NAME"
	workerTTL       = time.Second // the worker's lease
)

// TestHelperS3Worker is worker A of TestPausedWorkerLateWriteRefused, in a
// process of its own: it takes the lock, writes, says "LOCKED <token>",
// and, once told "GO" on stdin (after it was stopped past its lease and
// resumed), writes again with the same token, as a paused holder that does
// not know it was paused would, and says what the store answered.
func TestHelperS3Worker(t *testing.T) {
	if os.Getenv(workerVar) != "1" {
		return // run by TestPausedWorkerLateWriteRefused, in a child process
	}
	ctx := context.Background()
	name := os.Getenv(workerNameVar)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	c, err := reentrant.New(rdb, reentrant.WithTTL(workerTTL))
	require.NoError(t, err)
	l, err := c.Lock(ctx, name)
	require.NoError(t, err)
	s := storeOn(t, client(t, nil, 0), os.Getenv(workerBucketVar))
	require.NoError(t, s.Put(ctx, name, []byte("first by A"), l.Token()))
	fmt.Printf("LOCKED %d\n", l.Token())
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "GO\n", line)
	err = s.Put(ctx, name, []byte("late by A"), l.Token())
	switch {
	case errors.Is(err, fence.ErrStale):
		fmt.Printf("REFUSED %v\n", err)
	case err == nil:
		fmt.Println("ACCEPTED")
	default:
		fmt.Printf("ERROR %v\n", err)
	}
	_ = c.Close()
}

// Kleppmann's scenario end to end, with a real pause: worker A, a process
// of its own, takes the lock and writes to the S3 store; it is stopped
// (SIGSTOP) past its lease; B takes the lock with a higher token and
// writes; A resumes (SIGCONT) and writes with its old token. The store
// refuses A's late write, and the object holds B's bytes.
func TestPausedWorkerLateWriteRefused(t *testing.T) {
	url, access, secret := endpoint(t)
	addr := testenv.RedisAddr(t)
	b := bucket(t)
	r := make([]byte, 6)
	_, _ = rand.Read(r)
	name := "kleppmann-" + hex.EncodeToString(r)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperS3Worker$", "-test.count=1")
	cmd.Env = append(os.Environ(), workerVar+"=1", workerBucketVar+"="+b, workerNameVar+"="+name,
		endpointVar+"="+url, accessVar+"="+access, secretVar+"="+secret, testenv.RedisAddrVar+"="+addr)
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = time.Second
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	next := func(prefix string) string {
		t.Helper()
		for lines.Scan() {
			if rest, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return rest
			}
		}
		t.Fatalf("worker A ended without saying %q: %v", prefix, lines.Err())
		return ""
	}
	tokA, err := strconv.ParseUint(next("LOCKED "), 10, 64)
	require.NoError(t, err)

	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	paused := time.Now()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := reentrant.New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	lb, err := c.Lock(ctx, name) // waits until A's lease runs out in Redis
	require.NoError(t, err)
	require.Greater(t, uint64(lb.Token()), tokA)
	t.Logf("B took the lock %v after A was stopped, with token %d > %d", time.Since(paused).Round(time.Millisecond), lb.Token(), tokA)
	s := storeOn(t, client(t, nil, 0), b)
	require.NoError(t, s.Put(ctx, name, []byte("final by B"), lb.Token()))

	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	_, err = io.WriteString(stdin, "GO\n")
	require.NoError(t, err)
	answer := next("")
	for !strings.HasPrefix(answer, "REFUSED") && !strings.HasPrefix(answer, "ACCEPTED") && !strings.HasPrefix(answer, "ERROR") {
		answer = next("")
	}
	require.True(t, strings.HasPrefix(answer, "REFUSED"), "A's late write: %s", answer)
	t.Logf("A's late write: %s", answer)
	require.NoError(t, cmd.Wait())

	rec, err := s.Get(ctx, name)
	require.NoError(t, err)
	require.Equal(t, "final by B", string(rec.Value))
	require.Equal(t, lb.Token(), rec.Token)
	require.NoError(t, lb.Unlock(ctx))
}
