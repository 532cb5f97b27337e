package history_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// step is one fabricated operation: client, call and return times, input,
// output. A return of 0 means "never returned" (unknown outcome).
type step struct {
	client    int
	call, ret int64
	in, out   any
}

func ops(steps ...step) []porcupine.Operation {
	var end int64
	for _, s := range steps {
		end = max(end, s.call, s.ret)
	}
	h := make([]porcupine.Operation, len(steps))
	for i, s := range steps {
		ret := s.ret
		if ret == 0 {
			ret = end + 1
		}
		h[i] = porcupine.Operation{ClientId: s.client, Call: s.call, Return: ret, Input: s.in, Output: s.out}
	}
	return h
}

// seq lays out operations one after the other on client 0.
func seq(ios ...any) []porcupine.Operation {
	var steps []step
	for i := 0; i < len(ios); i += 2 {
		t := int64(i * 10)
		steps = append(steps, step{call: t, ret: t + 5, in: ios[i], out: ios[i+1]})
	}
	return ops(steps...)
}

func verdict(m porcupine.Model, h []porcupine.Operation) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(m, h, 10*time.Second)
}

// recordingTB is a testing.TB that keeps its failures instead of failing.
type recordingTB struct {
	testing.TB
	name   string
	errors []string
}

func (r *recordingTB) Helper()      {}
func (r *recordingTB) Name() string { return r.name }
func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
