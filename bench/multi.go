package main

import (
	"context"
	"fmt"
)

const wm = "W1 LockMulti of 3 names"

// multiNames are three lock names whose keys share one Redis Cluster hash
// slot (redfence's keys carry the name as their hash tag), found once.
var multiNames = sameSlot("wm-", 3)

// lockMulti (W1m) is W1 for several names: one goroutine takes and
// releases the same three free names cfg.pairs times, once with one
// LockMulti and Unlock of the MultiLease, once with three Lock calls and
// three Unlocks, each in a window of its own. Only redfence has LockMulti;
// other systems are skipped. Reported, with no target: what taking the
// names in one script saves against three.
func lockMulti(ctx context.Context, e *env) ([]metric, error) {
	r, ok := e.lk.(*redfenceLocker)
	if !ok {
		return nil, nil
	}
	multi := func(ctx context.Context) error {
		m, err := r.c.LockMulti(ctx, multiNames)
		if err != nil {
			return fmt.Errorf("lockmulti: %w", err)
		}
		return m.Unlock(ctx)
	}
	three := func(ctx context.Context) error {
		var us []unlocker
		for _, n := range multiNames {
			u, err := e.lk.lock(ctx, n)
			if err != nil {
				return fmt.Errorf("lock %q: %w", n, err)
			}
			us = append(us, u)
		}
		for i := len(us) - 1; i >= 0; i-- {
			if err := us[i].unlock(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	var out []metric
	var p50s []float64
	for _, v := range []struct {
		group string
		f     func(context.Context) error
	}{{wm + ": LockMulti", multi}, {wm + ": 3 x Lock", three}} {
		ms, err := timedPairs(ctx, e, v.group, v.f)
		if err != nil {
			return nil, err
		}
		p50s = append(p50s, ms[0].value) // timedPairs reports the p50 first
		out = append(out, ms...)
	}
	return append(out, num(wm, "LockMulti p50 / 3 x Lock p50", unitRatio, p50s[0]/p50s[1])), nil
}

// sameSlot returns n names starting with prefix whose Cluster hash slots
// are the same.
func sameSlot(prefix string, n int) []string {
	var out []string
	want := -1
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		if s := slotOf(name); want < 0 || s == want {
			want = s
			out = append(out, name)
		}
	}
	return out
}

// slotOf is the Cluster hash slot of a key whose hash tag is name (a name
// without braces or '%', which redfence's keys carry unescaped): CRC16
// (XMODEM) modulo 16384.
func slotOf(name string) int {
	var crc uint16
	for i := 0; i < len(name); i++ {
		crc ^= uint16(name[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
