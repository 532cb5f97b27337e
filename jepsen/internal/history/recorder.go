package history

import (
	"fmt"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Unknown is the output of an operation whose outcome is unknown. The
// models accept it for any input, either as if the operation took effect
// or as if it never happened.
var Unknown any = unknown{}

type unknown struct{}

func (unknown) String() string { return "unknown" }

// Recorder collects a history from many concurrent clients. It is safe for
// concurrent use. Times are nanoseconds since [NewRecorder] on the
// monotonic clock, so a wall-clock step cannot reorder operations.
type Recorder struct {
	start time.Time

	mu      sync.Mutex
	ops     []porcupine.Operation
	open    []bool // parallel to ops: not yet returned or unknown
	clients int
}

// NewRecorder returns an empty Recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

// Client is one sequential process of a history: it issues one operation
// at a time. After an operation of unknown outcome it is crashed and issues
// no more; take a new one from [Recorder.Client]. A Client is used by one
// goroutine at a time.
type Client struct {
	r       *Recorder
	id      int
	busy    bool
	crashed bool
}

// Client returns a new process with the next free client ID (zero-based,
// as porcupine's visualization wants).
func (r *Recorder) Client() *Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &Client{r: r, id: r.clients}
	r.clients++
	return c
}

// ID returns the client's porcupine ClientId.
func (c *Client) ID() int { return c.id }

// Crashed reports whether an operation of c ended with an unknown outcome.
func (c *Client) Crashed() bool { return c.crashed }

// Op is an operation in flight. End or Unknown finishes it, exactly once.
type Op struct {
	c *Client
	i int
}

// Begin records the call of an operation with input in. It panics if c
// has an operation in flight or has crashed: either is a bug in the test
// driving it, and the history would be meaningless.
func (c *Client) Begin(in any) *Op {
	if c.busy || c.crashed {
		panic(fmt.Sprintf("history: client %d began an operation while busy=%v crashed=%v", c.id, c.busy, c.crashed))
	}
	c.busy = true
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: c.id, Input: in, Call: r.now()})
	r.open = append(r.open, true)
	return &Op{c: c, i: len(r.ops) - 1}
}

// End records the return of o with a definite output.
func (o *Op) End(out any) {
	r := o.c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops[o.i].Return = r.now()
	r.ops[o.i].Output = out
	r.open[o.i] = false
	o.c.busy = false
}

// Unknown records that o's outcome is unknown because of err, and crashes
// its client. The operation never returns: [Recorder.Operations] gives it
// the end of the history as its return time.
func (o *Op) Unknown(err error) {
	r := o.c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops[o.i].Output = Unknown
	if err != nil {
		r.ops[o.i].Metadata = err.Error()
	}
	o.c.busy = false
	o.c.crashed = true
}

// unknownSince records an operation with input in, called at call, whose
// outcome is unknown, on a client of its own (crashed from the start). It
// stands for work a library did on the caller's behalf inside another
// operation, such as undoing an acquire of unknown outcome.
func (r *Recorder) unknownSince(in any, call int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.clients
	r.clients++
	r.ops = append(r.ops, porcupine.Operation{ClientId: id, Input: in, Call: call, Output: Unknown})
	r.open = append(r.open, true)
}

// Operations returns a copy of the history. Operations of unknown outcome,
// and any still in flight, get [Unknown] as output and the current time,
// later than every return so far, as their return time.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.now() + 1
	ops := make([]porcupine.Operation, len(r.ops))
	copy(ops, r.ops)
	for i := range ops {
		if r.open[i] {
			ops[i].Output = Unknown
			ops[i].Return = end
		}
	}
	return ops
}

// Counts sums up a history.
type Counts struct {
	Ops     int // operations called
	OK      int // returned and did what was asked
	Failed  int // returned a definite refusal: not acquired, not held, stale
	Unknown int // outcome unknown, or still in flight
	Clients int // processes, crashed ones included
}

// String formats the counts for a test log.
func (c Counts) String() string {
	return fmt.Sprintf("%d ops: %d ok, %d failed, %d unknown; %d clients", c.Ops, c.OK, c.Failed, c.Unknown, c.Clients)
}

// Counts returns the figures of the history so far. An output counts as
// failed when it has an OK() bool method that returns false.
func (r *Recorder) Counts() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := Counts{Ops: len(r.ops), Clients: r.clients}
	for i, op := range r.ops {
		switch o, ok := op.Output.(interface{ OK() bool }); {
		case r.open[i] || op.Output == Unknown:
			n.Unknown++
		case ok && !o.OK():
			n.Failed++
		default:
			n.OK++
		}
	}
	return n
}
