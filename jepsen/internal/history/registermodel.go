package history

import (
	"fmt"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/fence"
)

// Put is the input of a fenced write of Value under Key with Token. Give
// every Put a distinct Value, so a read names the write it saw.
type Put struct {
	Key   string
	Token fence.Token
	Value string
}

// Delete is the input of a fenced delete of Key with Token.
type Delete struct {
	Key   string
	Token fence.Token
}

// Get is the input of a read of Key.
type Get struct{ Key string }

// Highest is the input of a read of Key's highest accepted token.
type Highest struct{ Key string }

// WriteResult is the output of a [Put] or [Delete] that returned.
type WriteResult struct {
	Accepted bool // false: refused as stale, nothing changed
}

// OK reports whether the write was accepted.
func (w WriteResult) OK() bool { return w.Accepted }

// GetResult is the output of a [Get] that returned.
type GetResult struct {
	Found bool
	Value string      // when Found
	Token fence.Token // when Found: the token that wrote Value
}

// HighestResult is the output of a [Highest] that returned.
type HighestResult struct{ Token fence.Token }

// registerState is one key's state.
type registerState struct {
	Highest fence.Token
	Found   bool
	Value   string
	Token   fence.Token
}

// RegisterModel is the sequential specification of a fenced store, one
// register per key (the history is partitioned by key):
//
//   - A Put or Delete with token t is accepted iff t >= the highest token
//     accepted so far, which becomes t; otherwise it is refused as stale
//     and changes nothing.
//   - A Get returns the value and token of the last accepted Put, or not
//     found when there was none or a Delete came after it.
//   - Highest returns the highest accepted token (None before any write).
//
// So a write with an older token is never visible, under any fault: the
// model holds for every run, leases expiring or not.
func RegisterModel() porcupine.Model { return registerModel }

var registerModel = porcupine.Model{
	Partition: partition,
	Init:      func() any { return registerState{} },
	Step: func(state, in, out any) (bool, any) {
		s := state.(registerState)
		switch in := in.(type) {
		case Put:
			return stepWrite(s, in.Token, out, registerState{Highest: in.Token, Found: true, Value: in.Value, Token: in.Token})
		case Delete:
			return stepWrite(s, in.Token, out, registerState{Highest: in.Token})
		case Get:
			if out == Unknown {
				return true, s
			}
			r := out.(GetResult)
			return r == GetResult{Found: s.Found, Value: s.Value, Token: s.Token}, s
		case Highest:
			if out == Unknown {
				return true, s
			}
			return out.(HighestResult).Token == s.Highest, s
		}
		return false, s
	},
	DescribeOperation: describeRegisterOp,
	DescribeState: func(state any) string {
		s := state.(registerState)
		if !s.Found {
			return fmt.Sprintf("none, highest %d", s.Highest)
		}
		return fmt.Sprintf("%q by %d, highest %d", s.Value, s.Token, s.Highest)
	},
}

// stepWrite applies a write with token t that leads to next when accepted.
func stepWrite(s registerState, t fence.Token, out any, next registerState) (bool, any) {
	ok := fence.Check(s.Highest, t) == nil
	if out == Unknown {
		if ok {
			return true, next
		}
		return true, s
	}
	if out.(WriteResult).Accepted != ok {
		return false, s
	}
	if ok {
		return true, next
	}
	return true, s
}

func describeRegisterOp(in, out any) string {
	var call string
	switch in := in.(type) {
	case Put:
		call = fmt.Sprintf("put(%s, %q, %d)", in.Key, in.Value, in.Token)
	case Delete:
		call = fmt.Sprintf("delete(%s, %d)", in.Key, in.Token)
	case Get:
		call = fmt.Sprintf("get(%s)", in.Key)
	case Highest:
		call = fmt.Sprintf("highest(%s)", in.Key)
	}
	switch out := out.(type) {
	case WriteResult:
		if out.Accepted {
			return call + " -> ok"
		}
		return call + " -> stale"
	case GetResult:
		if !out.Found {
			return call + " -> not found"
		}
		return fmt.Sprintf("%s -> %q by %d", call, out.Value, out.Token)
	case HighestResult:
		return fmt.Sprintf("%s -> %d", call, out.Token)
	}
	return call + " -> unknown"
}
