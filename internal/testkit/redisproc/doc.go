//go:build unix

// Package redisproc starts and controls real redis-server processes for
// fault-injection tests: freeze one (SIGSTOP), kill it (SIGKILL) and restart
// it on the same port and directory with or without its AOF, promote a
// replica, run several independent masters.
//
// Every server listens on a free port on 127.0.0.1 only, keeps its files in
// its own directory under t.TempDir(), and runs in the foreground
// (--daemonize no) so the test owns its PID. t.Cleanup kills every process by
// PID and waits for it, whether the test passes, fails or panics; on Linux the
// kernel also kills it (PR_SET_PDEATHSIG) if the test binary itself dies
// without running cleanups, as on a -timeout. Every wait is bounded.
//
// A test that needs redis-server skips when it cannot find it, naming
// [BinaryVar]; under CI=true it fails instead, because in CI nothing may skip.
//
// Methods report failure through the testing.TB given to [Start] (t.Fatal),
// so, like t.Fatal itself, they must be called from the test's goroutine.
//
// # A failover that loses a write
//
// The classic "counter goes backwards" scenario needs a primary that
// acknowledged a write its replica never received. Stopping the replica with
// SIGSTOP is not enough: what the primary sends meanwhile waits in the
// replica's socket buffer, and whether the replica applies it on SIGCONT
// depends on a race with the promotion. [Server.Isolate] stops the replica and
// also cuts its link on the primary, so nothing more reaches it:
//
//	primary := redisproc.Start(t, redisproc.WithAOF("always"))
//	replica := redisproc.Start(t, redisproc.WithReplicaOf(primary))
//	p, r := primary.Client(), replica.Client()
//	p.Set(ctx, "k", 1, 0)
//	replica.WaitSync(ctx)  // the replica has k=1
//	replica.Isolate()      // frozen, link cut
//	p.Incr(ctx, "k")       // k=2 on the primary only
//	primary.Kill()         // before Resume, or the replica resyncs
//	replica.Resume()
//	replica.Promote()      // r.Get(ctx, "k") is "1"
//
// # What SIGKILL does and does not lose
//
// Redis writes the AOF before it replies, so after SIGKILL a restarted server
// with the AOF on has every acknowledged write whatever the appendfsync
// policy: the bytes were in the kernel's page cache. The policy matters only
// when the machine itself loses power, which a test cannot simulate here.
// Without the AOF (and with no save points, the default here) a restart
// starts empty.
package redisproc
