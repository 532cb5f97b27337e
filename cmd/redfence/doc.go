// Command redfence demonstrates and inspects redfence locks.
//
// Usage:
//
//	redfence demo [--redis host:port | --redlock] [--prefix P] [--store memory|redis|postgres|sqlite|mysql] [--postgres URL] [--mysql DSN] [--http | --rw]
//	redfence inspect NAME --redis host:port [--prefix P] [--json]
//	redfence list --redis host:port [--prefix P] [--json]
//	redfence unlock --force NAME --redis host:port [--prefix P] [--yes]
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
// nothing installed. --redis runs it on a real Redis, --redlock on a Redlock
// of three embedded servers (reentrant.NewRedlock); --prefix sets the key
// prefix of its locks (P:{NAME}) and of the redis store's records
// (P:store:{KEY}:rec); --postgres defaults to $REDFENCE_POSTGRES_URL, --mysql
// (a github.com/go-sql-driver/mysql DSN) to $REDFENCE_MYSQL_DSN. --http puts
// a fenced HTTP service (package fence/fencehttp) on loopback in front of the
// store: the workers write through it, their tokens in a Fencing-Token
// header, and A's late request is refused with 409 Conflict. --rw plays
// the story on a fenced read-write lock (reentrant.RWMutex): a writer
// paused past its write lease has its late write refused once a second
// writer wrote with a higher token; a reader, whose read lease's token is
// its epoch (the last write lease's token), is paused past its lease while
// a third writer writes, and its late fenced read (storage.GetAt at its
// epoch) is refused. --rw takes neither --redlock nor --http.
//
// inspect prints the state of one lock, read in one atomic step without
// taking it. The text form has one line per field, labelled with the JSON
// name below (ttl_ms aside); durations print as Go durations (12.345s) and
// "none" stands for an absent value. With --json it prints one object whose
// fields are always present, in this order:
//
//	name        string    the lock name
//	prefix      string    the key prefix (--prefix)
//	held        bool      whether an ownership holds the lock
//	owner       string    the holder's owner ID; "" when free
//	depth       int       the reentry depth; 0 when free
//	token       int       the holder's fencing token; 0 when free
//	lease       string    "active" when held, "none" when free,
//	                      "no_expiry" when held without an expiry
//	ttl         string    what is left of the lease as a Go duration ("12.345s");
//	                      "none" when free, "no expiry" without an expiry
//	ttl_ms      int       the same in whole milliseconds; 0 unless lease is "active"
//	meta        string    the holder's metadata (WithMetadata), or an election
//	                      term's value; "" when free or none
//	levels      [string]  the IDs of the hold's levels; [] when free
//	last_token  int       what the name's next token is above: with time tokens
//	                      (the default) the floor of the name's hash slot, shared
//	                      with the slot's other names; with strict tokens the
//	                      name's counter; 0 if none
//	waiters     int       Lock calls queued for the name
//	forced      object    the last forced unlock (redfence unlock --force), while
//	                      its record lives (until the forced lease would have
//	                      ended), as {"token": int, "at": string (RFC 3339),
//	                      "by": string}; null if none
//	found       bool      false when Redis holds nothing for NAME under the prefix:
//	                      no hold, waiter, counter or record (a wrong --prefix, or
//	                      a name never locked there); every other field is then
//	                      empty. The text form is then one line: "NAME: no state
//	                      under prefix P (never locked there)"
//	holders     [object]  list only, for a read-write lock or a semaphore
//	                      (reentrant.RWMutex, Semaphore): each holder as an
//	                      object of these fields, meta "write", "read" or
//	                      "permit slot N"; absent for a lock
//
// A released name keeps no history: its last owner and how its ownerships
// ended are not recorded. Fields may be added; none is renamed. The exit
// status is 0 whether or not the name was found.
//
// list prints every lock held under the prefix: on one server or, when the
// server of --redis runs in cluster mode, on every primary of its Cluster
// (inspect and unlock reach a Cluster so too). The keys are found with SCAN,
// never KEYS, and each lock is read in one atomic step of its own
// (reentrant.Client.List): a walk, not a snapshot. The text form is a table
// (NAME, TOKEN, OWNER, DEPTH, TTL, WAITERS, META); --json prints, one line
// per lock as it is found, the object inspect --json prints for it. A key
// under the prefix holding other data does not stop the walk: it is
// reported on stderr at the end, and the exit status is 1.
//
// unlock --force ends the current ownership of one lock, whoever holds it,
// and hands the lock to the next waiter (reentrant.Client.ForceUnlock):
// the safe way out of a stuck lock, where deleting its keys by hand could
// make tokens repeat. It shows the holder and asks for confirmation on a
// terminal; --yes skips the question and is required when stdin is not a
// terminal (/dev/null, a pipe, a file: without --yes, a usage error). It
// ends only the ownership it showed; a free lock is left
// alone.
//
// Exit status:
//
//	0    success, and help
//	1    runtime failure: Redis or a store unreachable or failing; unlock not
//	     confirmed, or the lock changed hands before it was forced
//	2    usage error: unknown command or flag, bad flag value (such as an
//	     invalid --prefix or --redis), missing or extra argument
//	3    demo: the safety check failed (a stale write was accepted, or another
//	     outcome fencing rules out)
//	130  interrupted (SIGINT)
package main
