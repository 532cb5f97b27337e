package history

import (
	"fmt"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/fence"
)

// Acquire is the input of a lock attempt (Lock, TryLock, or a reentry) by
// Owner on the lock Name.
type Acquire struct {
	Name  string
	Owner string
}

// Release is the input of an unlock by Owner of its ownership of Name that
// was granted Token.
type Release struct {
	Name  string
	Owner string
	Token fence.Token
}

// Abandon is what the lock client does after an [Acquire] of unknown
// outcome: it undoes that very request if Redis applied it (lua's
// abandon.lua). The recorder adds one, of unknown outcome, for every such
// acquire, called when the acquire was. Its effect, if it is placed while
// Owner holds Name, is one level of that hold released; otherwise none.
// That is more than the client can do (it undoes only its own request), so
// the model stays permissive: never a false alarm.
type Abandon struct {
	Name  string
	Owner string
}

// AcquireResult is the output of an [Acquire] that returned.
type AcquireResult struct {
	Acquired bool        // false: another owner holds the lock
	Token    fence.Token // when Acquired
	Depth    int64       // when Acquired: 1 fresh, 2 first reentry, ...
}

// OK reports whether the lock was acquired.
func (a AcquireResult) OK() bool { return a.Acquired }

// AnyDepth in a [ReleaseResult] says the caller cannot tell the depth left:
// [reentrant.Lease.Unlock] does not report it.
const AnyDepth = -1

// ReleaseResult is the output of a [Release] that returned.
type ReleaseResult struct {
	Released bool  // false: the caller's ownership did not hold the lock
	Depth    int64 // when Released: depth left, 0 once free; or AnyDepth
}

// OK reports whether the release was accepted.
func (r ReleaseResult) OK() bool { return r.Released }

// lockState is one lock name's state. A held lock with Token None was
// taken by an acquire of unknown outcome: its token is some value above
// Highest that nobody saw.
type lockState struct {
	Owner   string // "" when free
	Depth   int64
	Token   fence.Token
	Highest fence.Token // highest token known to have been issued
}

// LockModel is the sequential specification of a reentrant fenced mutex,
// one per name (the history is partitioned by name):
//
//   - An acquire of a free lock succeeds with depth 1 and a token strictly
//     above every token issued before for the name.
//   - An acquire by the holding owner succeeds with the same token and the
//     depth plus one; an acquire by anyone else is refused.
//   - A release by the holding owner with the current token succeeds and
//     leaves the depth minus one, freeing the lock at zero. A release with
//     the token of an ownership that has ended may be answered as done (a
//     retry of the release that ended it) only while the lock is free and
//     no token was issued since, and changes nothing; every other release
//     is refused and changes nothing.
//
// Nothing in the model expires: use it only for runs in which no lease can
// run out (long TTL, renewal on, no pauses).
func LockModel() porcupine.Model { return lockModel }

var lockModel = porcupine.Model{
	Partition: partition,
	Init:      func() any { return lockState{} },
	Step: func(state, in, out any) (bool, any) {
		s := state.(lockState)
		switch in := in.(type) {
		case Acquire:
			return stepAcquire(s, in, out)
		case Release:
			return stepRelease(s, in, out)
		case Abandon:
			if s.Owner != in.Owner {
				return true, s
			}
			if s.Depth--; s.Depth == 0 {
				return true, lockState{Highest: s.Highest}
			}
			return true, s
		}
		return false, s
	},
	DescribeOperation: describeLockOp,
	DescribeState: func(state any) string {
		s := state.(lockState)
		if s.Owner == "" {
			return fmt.Sprintf("free, highest %d", s.Highest)
		}
		return fmt.Sprintf("%s depth %d token %s, highest %d", short(s.Owner), s.Depth, tokenString(s.Token), s.Highest)
	},
}

func stepAcquire(s lockState, in Acquire, out any) (bool, any) {
	if out == Unknown {
		// If it happened it took or deepened the hold; if not, nothing
		// changed, which the checker expresses by placing it last.
		switch s.Owner {
		case "":
			return true, lockState{Owner: in.Owner, Depth: 1, Highest: s.Highest}
		case in.Owner:
			s.Depth++
		}
		return true, s
	}
	r := out.(AcquireResult)
	switch {
	case !r.Acquired:
		return s.Owner != "" && s.Owner != in.Owner, s
	case s.Owner == "":
		if r.Depth != 1 || r.Token <= s.Highest {
			return false, s
		}
		return true, lockState{Owner: in.Owner, Depth: 1, Token: r.Token, Highest: r.Token}
	case s.Owner == in.Owner:
		if r.Depth != s.Depth+1 || !sameToken(&s, r.Token) {
			return false, s
		}
		s.Depth++
		return true, s
	}
	return false, s
}

func stepRelease(s lockState, in Release, out any) (bool, any) {
	holds := s.Owner == in.Owner && (s.Token == in.Token || s.Token == fence.None && in.Token > s.Highest)
	if out == Unknown {
		if !holds {
			return true, s
		}
		return true, released(s, in.Token)
	}
	r := out.(ReleaseResult)
	if !r.Released {
		// With an unknown token the release might have been refused as
		// well: permissive, never a false alarm.
		return !holds || s.Token == fence.None, s
	}
	if !holds {
		// The release script answers a release of an ownership that has
		// ended as done (-2), changing nothing, only while the name is free
		// and its counter is that ownership's token: nothing expires here,
		// so a release ended it, and nobody took the lock since. It cannot
		// tell a retry of that release from a caller naming a token it
		// never held. A token issued since (the counter above it), seen or
		// not, rules it out.
		return freeSince(s, in.Token), s
	}
	if r.Depth != AnyDepth && r.Depth != s.Depth-1 {
		return false, s
	}
	return true, released(s, in.Token)
}

// freeSince reports whether the lock is free and t is the last token issued
// (as far as the history shows: an unseen token above it only makes the
// real answer a refusal, which the model accepts).
func freeSince(s lockState, t fence.Token) bool {
	return s.Owner == "" && t != fence.None && t == s.Highest
}

// released is s after one accepted release with token t, which also
// reveals the token of an ownership taken by an unknown acquire.
func released(s lockState, t fence.Token) lockState {
	if s.Token == fence.None {
		s.Token, s.Highest = t, t
	}
	s.Depth--
	if s.Depth == 0 {
		return lockState{Highest: s.Highest}
	}
	return s
}

// sameToken reports whether t is the holder's token, learning it when an
// unknown acquire left it unseen.
func sameToken(s *lockState, t fence.Token) bool {
	if s.Token == fence.None && t > s.Highest {
		s.Token, s.Highest = t, t
		return true
	}
	return s.Token == t
}

func describeLockOp(in, out any) string {
	var call string
	switch in := in.(type) {
	case Acquire:
		call = fmt.Sprintf("acquire(%s, %s)", in.Name, short(in.Owner))
	case Release:
		call = fmt.Sprintf("release(%s, %s, %d)", in.Name, short(in.Owner), in.Token)
	case Abandon:
		call = fmt.Sprintf("abandon(%s, %s)", in.Name, short(in.Owner))
	}
	switch out := out.(type) {
	case AcquireResult:
		if !out.Acquired {
			return call + " -> not acquired"
		}
		return fmt.Sprintf("%s -> token %d depth %d", call, out.Token, out.Depth)
	case ReleaseResult:
		switch {
		case !out.Released:
			return call + " -> not held"
		case out.Depth == AnyDepth:
			return call + " -> ok"
		}
		return fmt.Sprintf("%s -> depth %d", call, out.Depth)
	}
	return call + " -> unknown"
}

func tokenString(t fence.Token) string {
	if t == fence.None {
		return "?"
	}
	return t.String()
}

// short keeps owner IDs readable in the visualization.
func short(owner string) string {
	if len(owner) > 8 {
		return owner[:8]
	}
	return owner
}

// keyed is an input of the models: the key (lock name, store key) whose
// operations are checked apart from every other key's.
type keyed interface{ partKey() string }

func (in Acquire) partKey() string  { return in.Name }
func (in Release) partKey() string  { return in.Name }
func (in Abandon) partKey() string  { return in.Name }
func (in QAcquire) partKey() string { return in.Name }
func (in QRelease) partKey() string { return in.Name }
func (in QLeave) partKey() string   { return in.Name }
func (in Put) partKey() string      { return in.Key }
func (in Delete) partKey() string   { return in.Key }
func (in Get) partKey() string      { return in.Key }
func (in Highest) partKey() string  { return in.Key }

// partition splits a history by the key each input names, in order of first
// appearance, so each key is checked on its own: far faster, and a
// violation names its key. An input that is not keyed is a bug of the test
// that recorded it: it panics.
func partition(ops []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range ops {
		in, ok := op.Input.(keyed)
		if !ok {
			panic(fmt.Sprintf("history: input %T is not one of the models'", op.Input))
		}
		k := in.partKey()
		i, ok := idx[k]
		if !ok {
			i = len(parts)
			idx[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}
