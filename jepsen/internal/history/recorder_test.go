package history_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/redfence/redfence/jepsen/internal/history"
)

func TestRecorderTimesAndUnknownOutcomes(t *testing.T) {
	r := history.NewRecorder()
	c0, c1 := r.Client(), r.Client()
	if c0.ID() != 0 || c1.ID() != 1 {
		t.Fatalf("client IDs %d, %d; want 0, 1", c0.ID(), c1.ID())
	}
	c0.Begin(put(1, "a")).End(accepted)
	c0.Begin(put(1, "b")).End(stale)
	lost := c1.Begin(put(2, "c"))
	c0.Begin(get).End(read("a", 1))
	lost.Unknown(errors.New("read tcp: i/o timeout"))
	inFlight := c0.Begin(get) // never finished: also unknown

	if !c1.Crashed() || c0.Crashed() {
		t.Fatalf("crashed: c0 %v c1 %v; want only c1", c0.Crashed(), c1.Crashed())
	}
	h := r.Operations()
	var end int64
	for _, op := range []porcupine.Operation{h[0], h[1], h[3]} {
		if op.Call > op.Return {
			t.Errorf("%v: call after return", op)
		}
		end = max(end, op.Return)
	}
	for _, op := range []porcupine.Operation{h[2], h[4]} {
		if op.Output != history.Unknown || op.Return <= end {
			t.Errorf("%v: want output unknown and return after %d", op, end)
		}
	}
	if h[2].Metadata != "read tcp: i/o timeout" {
		t.Errorf("metadata %v, want the error", h[2].Metadata)
	}
	want := history.Counts{Ops: 5, OK: 2, Failed: 1, Unknown: 2, Clients: 2}
	if n := r.Counts(); n != want {
		t.Errorf("counts %v, want %v", n, want)
	}
	inFlight.End(notFound)
	if n := r.Counts(); n.Unknown != 1 {
		t.Errorf("after End: %v, want 1 unknown", n)
	}
}

func TestCrashedClientMayNotContinue(t *testing.T) {
	c := history.NewRecorder().Client()
	c.Begin(get).Unknown(nil)
	defer func() {
		if recover() == nil {
			t.Error("Begin on a crashed client did not panic")
		}
	}()
	c.Begin(get)
}

func TestRecorderConcurrentClients(t *testing.T) {
	r := history.NewRecorder()
	var wg sync.WaitGroup
	for range 8 {
		c := r.Client()
		wg.Go(func() {
			for range 100 {
				_ = c.Do(highest, func() (any, error) { return top(0), nil })
			}
		})
	}
	wg.Wait()
	if n := r.Counts(); n.Ops != 800 || n.OK != 800 {
		t.Fatalf("counts %v, want 800 ok", n)
	}
	history.Linearizable(t, history.RegisterModel(), r.Operations(), 0)
}

func TestLinearizableNamesTheVisualization(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(history.HistoryDirVar, dir)
	tb := &recordingTB{name: "TestX/sub case"}
	bad := seq(put(2, "a"), accepted, put(1, "b"), accepted)
	if r := history.Linearizable(tb, history.RegisterModel(), bad, 0); r.Verdict != porcupine.Illegal {
		t.Fatalf("verdict %s", r.Verdict)
	}
	if len(tb.errors) != 1 {
		t.Fatalf("errors %q, want one", tb.errors)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "redfence-TestX_sub_case-*.html"))
	if len(files) != 1 || !strings.Contains(tb.errors[0], files[0]) {
		t.Fatalf("files %q; error %q should name the one file", files, tb.errors[0])
	}
	if fi, err := os.Stat(files[0]); err != nil || fi.Size() == 0 {
		t.Fatalf("visualization: %v, %v", fi, err)
	}

	tb = &recordingTB{name: "ok"}
	history.Linearizable(tb, history.RegisterModel(), seq(put(1, "a"), accepted), 0)
	history.NotLinearizable(tb, history.RegisterModel(), bad, 0)
	if len(tb.errors) != 0 {
		t.Errorf("unexpected failures: %q", tb.errors)
	}
	history.NotLinearizable(tb, history.RegisterModel(), seq(put(1, "a"), accepted), 0)
	if len(tb.errors) != 1 || !strings.Contains(tb.errors[0], "did not catch") {
		t.Errorf("NotLinearizable on a good history: %q", tb.errors)
	}
}
