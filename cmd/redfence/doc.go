// Command redfence demonstrates and inspects redfence locks.
//
// Usage:
//
//	redfence demo [--redis host:port] [--prefix P] [--store memory|redis|postgres|sqlite] [--postgres URL]
//	redfence inspect NAME --redis host:port [--prefix P] [--json]
//	redfence help [COMMAND]
//
// Flags take one dash or two and may come before or after NAME; -h or
// --help after a command prints its help, and redfence --help prints all
// of it, every flag with its meaning and default. Help goes to stdout,
// errors to stderr.
//
// demo plays Kleppmann's pause scenario: a worker holding a lock is paused
// past its lease, a second worker takes the lock with a higher token and
// writes, and the first worker's late write is refused by the fenced store.
// It checks each step and fails if fencing did not hold. With no flags it
// runs on an embedded Redis (miniredis) and an in-memory store, so it needs
// nothing installed. --redis runs it on a real Redis; --prefix sets the key
// prefix of its locks (P:{NAME}) and of the redis store's records
// (P:store:{KEY}:rec); --postgres defaults to $REDFENCE_POSTGRES_URL.
//
// inspect prints the state of one lock, read in one atomic step without
// taking it, as text or, with --json, as one JSON object.
//
// Exit status:
//
//	0    success, and help
//	1    runtime failure: Redis or a store unreachable or failing
//	2    usage error: unknown command or flag, bad flag value (such as an
//	     invalid --prefix or --redis), missing or extra argument
//	3    demo: the safety check failed (a stale write was accepted, or another
//	     outcome fencing rules out)
//	130  interrupted (SIGINT)
package main
