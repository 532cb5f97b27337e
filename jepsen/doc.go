// Package jepsen holds redfence's whole-system safety tests, in the spirit
// of Jepsen: histories of lock and store operations are recorded while
// things go wrong, then checked.
//
// The package has no API; everything is in its tests. TestLinearizable...
// checks histories for linearizability with porcupine (jepsen/internal/history).
// TestFault... injects real faults, each on loopback and bounded in time:
// lock holders run as separate processes (the test binary, re-executed)
// and are frozen with SIGSTOP past their lease; redis-server processes
// (internal/testkit/redisproc) are paused, killed and restarted with and without
// their AOF, and a replica is promoted after losing writes, with and
// without reentrant.WithReplicaAck; the network is slowed, cut and reset
// (internal/testkit/netfault). Writers and readers of a fenced read-write
// lock, and more holders than permits of a fenced semaphore, are frozen
// the same way: their late writes and fenced reads (storage.GetAt) must be
// refused, and a sampler checks the server's state never admits too many
// at once. An oracle checks that no fenced
// store ever accepted a write older than one it had accepted before, and
// counts what the faults cost: overlapping holders, unknown outcomes,
// repeated tokens and writes fenced out under them.
//
// Tests that need the Redis and PostgreSQL named by REDFENCE_REDIS_ADDR and
// REDFENCE_POSTGRES_URL skip without them, as do those that need
// redis-server. REDFENCE_LONG=1 runs longer versions.
package jepsen
