// Package history records what concurrent clients did to a lock or a store
// and checks it for linearizability with porcupine, the way Jepsen does.
//
// A [Recorder] stamps each operation's call and return with one monotonic
// clock shared by every client. An operation whose outcome the client
// cannot know (a timeout, a reset connection: the server may or may not
// have applied it) is recorded as [Unknown]: it never returns, so the
// checker may place its effect anywhere after its call, or nowhere, and
// the client that issued it stops, because a client that lost track of one
// operation cannot vouch for the order of its next ones. Start a new
// [Client] to go on.
//
// Two models describe what a correct system may answer: [LockModel], a
// reentrant mutex that hands out fencing tokens, and [RegisterModel], a
// fenced register per key. [Check] runs porcupine with a time bound;
// [Linearizable] does so inside a test and, on a violation, writes
// porcupine's HTML visualization to a file the failure names.
//
// The recording helpers ([Client.TryLock], [Client.Put], ...) call the real
// lock and stores and sort their errors into definite answers and unknown
// outcomes; see each one's doc.
package history
