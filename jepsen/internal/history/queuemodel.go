package history

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/fence"
)

// QAcquire is one run of the acquire script (scripts.Acquire) by Owner for the
// level Level: a TryLock, a reentry, the first attempt of a Lock, or one of
// its polls. With Wait the caller joins the wait queue, or stays in it,
// when it does not get the lock.
type QAcquire struct {
	Name, Owner, Level string
	Wait               bool
}

// QRelease is one run of the release script for the level Level of Owner's
// ownership that was granted Token.
type QRelease struct {
	Name, Owner, Level string
	Token              fence.Token
}

// QLeave is one run of the abandon script by a waiter that gives up: Level
// leaves the queue, and gives the lock on if it had been handed to it.
type QLeave struct {
	Name, Owner, Level string
}

// LeaveResult is the output of a [QLeave]: whether the level was held (the
// lock had been handed to it) and was given back.
type LeaveResult struct{ Removed bool }

// queueState is one lock name's state in [QueueLockModel]. Its fields are
// strings and numbers so that states compare with ==.
type queueState struct {
	Owner   string      // "" when free
	Levels  string      // the held levels as sorted "id=depth" joined by ','
	Token   fence.Token // None while a handed lock is unclaimed: some value above Highest
	Highest fence.Token
	Queue   string // the waiting levels, oldest first, as "id owner" joined by ','
}

func (s queueState) levels() map[string]int64 {
	m := map[string]int64{}
	if s.Levels == "" {
		return m
	}
	for _, f := range strings.Split(s.Levels, ",") {
		id, d, _ := strings.Cut(f, "=")
		m[id], _ = strconv.ParseInt(d, 10, 64)
	}
	return m
}

func (s *queueState) setLevels(m map[string]int64) {
	fs := make([]string, 0, len(m))
	for id, d := range m {
		fs = append(fs, id+"="+strconv.FormatInt(d, 10))
	}
	slices.Sort(fs)
	s.Levels = strings.Join(fs, ",")
}

type waiting struct{ level, owner string }

func (s queueState) queue() []waiting {
	var q []waiting
	if s.Queue == "" {
		return q
	}
	for _, f := range strings.Split(s.Queue, ",") {
		l, o, _ := strings.Cut(f, " ")
		q = append(q, waiting{l, o})
	}
	return q
}

func (s *queueState) setQueue(q []waiting) {
	fs := make([]string, len(q))
	for i, w := range q {
		fs[i] = w.level + " " + w.owner
	}
	s.Queue = strings.Join(fs, ",")
}

// enqueue puts level at the back of the queue unless it is in it.
func (s *queueState) enqueue(level, owner string) {
	q := s.queue()
	if !slices.ContainsFunc(q, func(w waiting) bool { return w.level == level }) {
		s.setQueue(append(q, waiting{level, owner}))
	}
}

// dequeue takes level out of the queue if it is in it.
func (s *queueState) dequeue(level string) {
	s.setQueue(slices.DeleteFunc(s.queue(), func(w waiting) bool { return w.level == level }))
}

// free frees the lock, handing it to the oldest waiter if there is one: that
// waiter's owner holds it at depth 1 at the waiter's level, with a token
// nobody has seen yet.
func (s *queueState) free() {
	s.Owner, s.Levels, s.Token = "", "", fence.None
	if q := s.queue(); len(q) > 0 {
		s.Owner, s.Levels = q[0].owner, q[0].level+"=1"
		s.setQueue(q[1:])
	}
}

// QueueLockModel is the sequential specification of the lock with its wait
// queue and direct handoff, one per name, for histories of raw script runs
// (package lua) in which nothing expires:
//
//   - An acquire of a free lock takes it (depth 1, a token above every
//     earlier one) if nobody waits or the caller is the oldest waiter;
//     otherwise the lock is handed to the oldest waiter (depth 1 at its
//     level, a fresh token) and the caller is refused. Waiters are served
//     in the order they joined the queue.
//   - An acquire by the holding owner for a level it holds answers the
//     depth that level was granted at (a repeat, or the claim of a handed
//     lock, which reveals its token); for a new level it reenters (depth
//     plus one) and never queues.
//   - An acquire refused joins the queue at the back if it waits and is not
//     in it already.
//   - A release by the holder of a level it holds removes the level; at
//     depth 0 the lock is freed and handed to the oldest waiter.
//   - A waiter that leaves is taken out of the queue; a level it holds is
//     given back as a release would.
func QueueLockModel() porcupine.Model { return queueLockModel }

var queueLockModel = porcupine.Model{
	Partition: partition,
	Init:      func() any { return queueState{} },
	Step: func(state, in, out any) (bool, any) {
		s := state.(queueState)
		switch in := in.(type) {
		case QAcquire:
			return stepQAcquire(s, in, out.(AcquireResult))
		case QRelease:
			return stepQRelease(s, in, out.(ReleaseResult))
		case QLeave:
			return stepQLeave(s, in, out.(LeaveResult))
		}
		return false, s
	},
	DescribeOperation: func(in, out any) string {
		switch in := in.(type) {
		case QAcquire:
			r := out.(AcquireResult)
			verb := "trylock"
			if in.Wait {
				verb = "lock"
			}
			if !r.Acquired {
				return fmt.Sprintf("%s(%s, %s %s) refused", verb, in.Name, short(in.Owner), in.Level)
			}
			return fmt.Sprintf("%s(%s, %s %s) -> token %d depth %d", verb, in.Name, short(in.Owner), in.Level, r.Token, r.Depth)
		case QRelease:
			r := out.(ReleaseResult)
			if !r.Released {
				return fmt.Sprintf("release(%s, %s %s, %d) not held", in.Name, short(in.Owner), in.Level, in.Token)
			}
			return fmt.Sprintf("release(%s, %s %s, %d) -> depth %d", in.Name, short(in.Owner), in.Level, in.Token, r.Depth)
		case QLeave:
			return fmt.Sprintf("leave(%s, %s %s) -> %v", in.Name, short(in.Owner), in.Level, out.(LeaveResult).Removed)
		}
		return fmt.Sprint(in, out)
	},
	DescribeState: func(state any) string {
		s := state.(queueState)
		held := "free"
		if s.Owner != "" {
			held = fmt.Sprintf("%s [%s] token %s", short(s.Owner), s.Levels, tokenString(s.Token))
		}
		return fmt.Sprintf("%s, highest %d, queue [%s]", held, s.Highest, s.Queue)
	},
}

func stepQAcquire(s queueState, in QAcquire, r AcquireResult) (bool, any) {
	if s.Owner == in.Owner {
		lv := s.levels()
		d, held := lv[in.Level]
		if !held {
			d = int64(len(lv)) + 1
			lv[in.Level] = d
			s.setLevels(lv)
			s.dequeue(in.Level)
		}
		if !r.Acquired || r.Depth != d {
			return false, s
		}
		if s.Token == fence.None {
			if r.Token <= s.Highest {
				return false, s
			}
			s.Token, s.Highest = r.Token, r.Token
		}
		return r.Token == s.Token, s
	}
	if s.Owner == "" {
		q := s.queue()
		if len(q) == 0 || q[0].level == in.Level {
			if !r.Acquired || r.Depth != 1 || r.Token <= s.Highest {
				return false, s
			}
			s.dequeue(in.Level)
			s.Owner, s.Levels, s.Token, s.Highest = in.Owner, in.Level+"=1", r.Token, r.Token
			return true, s
		}
		s.free() // handed to the oldest waiter
	}
	if r.Acquired {
		return false, s
	}
	if in.Wait {
		s.enqueue(in.Level, in.Owner)
	}
	return true, s
}

func stepQRelease(s queueState, in QRelease, r ReleaseResult) (bool, any) {
	if s.Owner != in.Owner || s.Token != in.Token {
		return !r.Released, s
	}
	lv := s.levels()
	if _, ok := lv[in.Level]; !ok {
		return r.Released && r.Depth == int64(len(lv)), s // a repeat
	}
	delete(lv, in.Level)
	if !r.Released || r.Depth != int64(len(lv)) {
		return false, s
	}
	s.setLevels(lv)
	if len(lv) == 0 {
		s.free()
	}
	return true, s
}

func stepQLeave(s queueState, in QLeave, r LeaveResult) (bool, any) {
	s.dequeue(in.Level)
	lv := s.levels()
	if _, ok := lv[in.Level]; !ok || s.Owner != in.Owner {
		return !r.Removed, s
	}
	delete(lv, in.Level)
	s.setLevels(lv)
	if len(lv) == 0 {
		s.free()
	}
	return r.Removed, s
}
