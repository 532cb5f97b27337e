//go:build unix

package jepsen_test

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/redfence/redfence/storage"
)

// faultCheck is the oracle. It reads ops as a history of one lock and a
// fenced store, and final as each written key's record at the end (nil if
// absent), and returns the figures. Its rules, per key:
//
//   - An accepted write whose token is below that of a write accepted and
//     finished before it started is a stale write accepted. In any store
//     order consistent with real time, accepted tokens must not decrease.
//   - The final record is the highest accepted token's (or an unknown
//     write's at least as high) and holds a value written with that token,
//     by a write no accepted write started after.
//   - A refusal must be explained: some write with a higher token, accepted
//     or unknown, started before the refusal returned.
//
// Unknown writes may or may not have happened, so they can explain a final
// record or a refusal but are never held against the store.
//
// With REDFENCE_FAULT_DUMP set to a directory, faultCheck also writes the
// history there as <scenario>.json, for a closer look.
func faultCheck(scenario string, ops []faultOp, final map[string]*storage.Record) faultReport {
	faultDump(scenario, ops)
	r := faultReport{Scenario: scenario, Ops: len(ops)}
	byKey := map[string][]faultOp{}
	for _, op := range ops {
		if op.Outcome == faultUnknown {
			r.Unknown++
		}
		switch op.Kind {
		case faultLock:
			switch op.Outcome {
			case faultOK:
				r.Acquisitions++
			case faultNotReplicated:
				r.NotReplicated++
			}
		case faultWrite:
			byKey[op.Key] = append(byKey[op.Key], op)
			switch op.Outcome {
			case faultOK:
				r.Accepted++
			case faultStale:
				r.Refused++
			}
			if op.AfterLoss {
				r.AfterLoss++
			}
		}
	}
	r.MutexViolations = faultOverlaps(ops)
	backwards := faultTokens(ops, &r)
	for _, op := range ops {
		if op.Kind == faultWrite && op.Outcome == faultStale && backwards[[2]uint64{uint64(op.Proc), op.Token}] {
			r.FencedOut++
		}
	}

	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range byKey {
			if !yield(k) {
				return
			}
		}
	})
	for i, k := range keys {
		ws := byKey[k]
		var highest uint64
		for _, w := range ws {
			if w.Outcome == faultOK {
				highest = max(highest, w.Token)
			}
		}
		r.Highest = max(r.Highest, highest)
		for _, w := range ws {
			switch w.Outcome {
			case faultOK:
				if faultStaleAccepted(w, ws) {
					r.StaleAccepted++
				}
			case faultStale:
				if !faultRefusalExplained(w, ws) {
					r.Anomalies = append(r.Anomalies, fmt.Sprintf("key %q: write of token %d refused with no higher write before it", k, w.Token))
				}
			}
		}
		rec, ok := final[k]
		if !ok {
			continue
		}
		if i == 0 && rec != nil {
			r.FinalToken = uint64(rec.Token)
		}
		if a := faultFinalAnomaly(k, rec, ws, highest); a != "" {
			r.Anomalies = append(r.Anomalies, a)
		}
	}
	return r
}

// faultStaleAccepted reports whether accepted write w came after (in real
// time) an accepted write with a higher token.
func faultStaleAccepted(w faultOp, ws []faultOp) bool {
	for _, x := range ws {
		if x.Outcome == faultOK && x.End < w.Start && x.Token > w.Token {
			return true
		}
	}
	return false
}

// faultRefusalExplained reports whether a write with a higher token,
// accepted or unknown, started before refused write w returned.
func faultRefusalExplained(w faultOp, ws []faultOp) bool {
	for _, x := range ws {
		if (x.Outcome == faultOK || x.Outcome == faultUnknown) && x.Token > w.Token && x.Start < w.End {
			return true
		}
	}
	return false
}

// faultFinalAnomaly checks key's final record against its writes.
func faultFinalAnomaly(key string, rec *storage.Record, ws []faultOp, highest uint64) string {
	if rec == nil {
		if highest > 0 {
			return fmt.Sprintf("key %q: no final record, but token %d was accepted", key, highest)
		}
		return ""
	}
	tok := uint64(rec.Token)
	var src *faultOp
	for i, w := range ws {
		if (w.Outcome == faultOK || w.Outcome == faultUnknown) && w.Token == tok && w.Value == string(rec.Value) {
			src = &ws[i]
		}
	}
	switch {
	case tok < highest:
		return fmt.Sprintf("key %q: final token %d is below the highest accepted %d", key, tok, highest)
	case src == nil:
		return fmt.Sprintf("key %q: final record (%q, token %d) matches no write", key, rec.Value, tok)
	}
	for _, x := range ws {
		if x.Outcome == faultOK && x.Start > src.End {
			return fmt.Sprintf("key %q: final record (%q, token %d) was overwritten by an accepted write (%q, token %d) that started after it ended", key, rec.Value, tok, x.Value, x.Token)
		}
	}
	return ""
}

// faultOverlaps counts pairs of acquisitions by different procs whose
// holders believed they held the lock at overlapping times. A holder
// believes from the moment Lock returns until it calls Unlock or its lease
// reports itself lost, whichever is first; a holder that never unlocked
// (killed, stopped by the test) believes until its last operation.
func faultOverlaps(ops []faultOp) int {
	type belief struct {
		proc       int
		from, till int64
	}
	var bs []belief
	open := map[int]int{} // proc -> index in bs of its open belief
	last := map[int]int64{}
	for _, op := range slices.SortedFunc(slices.Values(ops), func(a, b faultOp) int { return cmp.Compare(a.End, b.End) }) {
		last[op.Proc] = max(last[op.Proc], op.End)
		switch {
		case op.Kind == faultLock && op.Outcome == faultOK:
			open[op.Proc] = len(bs)
			bs = append(bs, belief{proc: op.Proc, from: op.End, till: -1})
		case op.Kind == faultUnlock:
			if i, ok := open[op.Proc]; ok {
				till := op.Start
				if op.LostAt > 0 && op.LostAt < till {
					till = op.LostAt
				}
				bs[i].till = till
				delete(open, op.Proc)
			}
		}
	}
	for _, i := range open {
		bs[i].till = last[bs[i].proc]
	}
	n := 0
	for i := range bs {
		for j := i + 1; j < len(bs); j++ {
			a, b := bs[i], bs[j]
			if a.proc != b.proc && a.from < b.till && b.from < a.till {
				n++
			}
		}
	}
	return n
}

// faultTokens counts repeated tokens into r and returns the acquisitions,
// as {proc, token}, whose token went backwards: repeated, or issued after a
// higher one had been.
func faultTokens(ops []faultOp, r *faultReport) map[[2]uint64]bool {
	locks := slices.DeleteFunc(slices.Clone(ops), func(op faultOp) bool {
		return op.Kind != faultLock || op.Outcome != faultOK
	})
	slices.SortFunc(locks, func(a, b faultOp) int { return cmp.Compare(a.End, b.End) })
	seen := map[uint64]bool{}
	backwards := map[[2]uint64]bool{}
	var top uint64
	for _, l := range locks {
		if seen[l.Token] {
			r.TokensRepeated++
			if !slices.Contains(r.Repeated, l.Token) {
				r.Repeated = append(r.Repeated, l.Token)
			}
		}
		if seen[l.Token] || l.Token < top {
			backwards[[2]uint64{uint64(l.Proc), l.Token}] = true
		}
		seen[l.Token] = true
		top = max(top, l.Token)
	}
	slices.Sort(r.Repeated)
	return backwards
}
