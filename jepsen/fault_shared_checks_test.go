//go:build unix

package jepsen_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redfence/redfence/internal/testkit/mutant"
	"github.com/redfence/redfence/internal/testkit/testenv"
	"github.com/redfence/redfence/reentrant"
)

// The samplers of the rw-pause and semaphore-pause scenarios catch a
// server that admits too many: a reader beside a writer, a permit past the
// count (planted bugs in the scripts of this process), and see nothing
// wrong in the real scripts' state.
func TestFaultSharedSamplersCatchOverAdmission(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, b testenv.Backend) {
		for _, planted := range []bool{false, true} {
			name := map[bool]string{false: "real", true: "planted"}[planted]
			t.Run("rw/"+name, func(t *testing.T) {
				if planted {
					mutant.ReaderBesideWriter(t)
				}
				cfg := faultHolderConfig{RedisAddr: b.Client.Options().Addr, Name: testenv.Unique(t)}
				lc, err := reentrant.New(b.Client)
				require.NoError(t, err)
				t.Cleanup(func() { _ = lc.Close() })
				rw := lc.RWMutex(cfg.Name)
				w, err := rw.Lock(t.Context())
				require.NoError(t, err)
				t.Cleanup(func() { _ = w.Unlock(context.Background()) })
				r, err := rw.TryRLock(t.Context())
				if !planted {
					require.ErrorIs(t, err, reentrant.ErrNotAcquired)
				} else {
					require.NoError(t, err)
					t.Cleanup(func() { _ = r.Unlock(context.Background()) })
				}
				stop, taken := faultSampleRW(t, cfg)
				require.Eventually(t, func() bool { return taken.Load() >= 3 }, 30*time.Second, time.Millisecond)
				s := stop()
				if !planted {
					require.Empty(t, s.anomalies)
					return
				}
				require.NotEmpty(t, s.anomalies)
				require.Contains(t, s.anomalies[0], "1 writers and 1 readers hold the lock at once")
			})
			t.Run("semaphore/"+name, func(t *testing.T) {
				if planted {
					mutant.SemaphoreOverAdmits(t)
				}
				cfg := faultHolderConfig{RedisAddr: b.Client.Options().Addr, Name: testenv.Unique(t)}
				lc, err := reentrant.New(b.Client)
				require.NoError(t, err)
				t.Cleanup(func() { _ = lc.Close() })
				sem := lc.Semaphore(cfg.Name, 2)
				for i := range 3 {
					p, err := sem.TryAcquire(t.Context())
					if i == 2 && !planted {
						require.ErrorIs(t, err, reentrant.ErrNotAcquired)
						continue
					}
					require.NoError(t, err)
					t.Cleanup(func() { _ = p.Unlock(context.Background()) })
				}
				stop, taken := faultSampleSemaphore(t, cfg, 2)
				require.Eventually(t, func() bool { return taken.Load() >= 3 }, 30*time.Second, time.Millisecond)
				s := stop()
				require.Equal(t, map[bool]int{false: 2, true: 3}[planted], s.max)
				if !planted {
					require.Empty(t, s.anomalies)
					return
				}
				all := strings.Join(s.anomalies, "\n")
				for _, want := range []string{"Inspect: 3 live holders of 2 permits", "PTTL: 3 live holders of 2 permits", "Inspect: a slot out of range", "PTTL: a slot out of range"} {
					require.Contains(t, all, want)
				}
			})
		}
	})
}

// The read, epoch and late-operation checks on small hand-made histories.
func TestFaultSharedCheckRules(t *testing.T) {
	write := func(proc int, key string, tok uint64, outcome string, at int64) faultOp {
		return faultOp{Proc: proc, Kind: faultWrite, Key: key, Token: tok, Outcome: outcome, Start: at, End: at + 1}
	}
	read := func(proc int, key string, epoch, rec uint64, outcome string, at int64) faultOp {
		return faultOp{Proc: proc, Kind: faultRead, Key: key, Token: epoch, Read: rec, Outcome: outcome, Start: at, End: at + 1}
	}
	lease := func(proc int, kind string, tok uint64, at int64) faultOp {
		return faultOp{Proc: proc, Kind: kind, Token: tok, Outcome: faultOK, Start: at, End: at + 1}
	}

	t.Run("reads", func(t *testing.T) {
		good := []faultOp{
			read(2, "k", 3, 0, faultAbsent, 0),
			write(1, "k", 5, faultOK, 10),
			read(2, "k", 5, 5, faultOK, 20),
			read(3, "k", 3, 0, faultStale, 20), // explained by token 5
			read(3, "k", 4, 0, faultStale, 10), // the write began before it returned
		}
		require.Empty(t, faultCheckReads(good))
		bad := append(good,
			read(2, "k", 3, 2, faultOK, 30),      // token 5 was accepted before
			read(2, "k", 4, 0, faultAbsent, 30),  // the same, finding nothing
			read(2, "k", 5, 7, faultOK, 30),      // a record above the epoch
			read(2, "j", 4, 0, faultStale, 30),   // no write above 4 on j
			write(1, "j", 3, faultOK, 40),        // (not above 4)
			read(2, "j", 2, 0, faultStale, 35),   // j's only write began after
			read(2, "k", 9, 5, faultStale, 50),   // nothing above 9 anywhere
			read(2, "k", 1, 0, faultUnknown, 60), // not checked
		)
		require.Len(t, faultCheckReads(bad), 6, "%q", faultCheckReads(bad))
	})

	t.Run("epochs", func(t *testing.T) {
		good := []faultOp{
			lease(2, faultRLock, 3, 0), // a fresh token: no write before
			lease(1, faultLock, 5, 10),
			lease(2, faultRLock, 5, 20),
			lease(3, faultRLock, 5, 20),
			lease(1, faultLock, 6, 30),
			lease(2, faultRLock, 6, 40),
			{Proc: 1, Kind: faultLock, Token: 1, Outcome: faultFailed, Start: 50, End: 51}, // not granted
		}
		require.Empty(t, faultCheckEpochs(good))
		bad := append(good,
			lease(3, faultLock, 6, 60),  // not above the write lease of 6
			lease(2, faultRLock, 5, 70), // below the write leases of 6
		)
		// 6 is not above the two leases of 6 before it; 5 is below two writes of 6.
		require.Len(t, faultCheckEpochs(bad), 4, "%q", faultCheckEpochs(bad))
	})

	t.Run("late", func(t *testing.T) {
		pause := func(proc int, role string, tok uint64, overtaken bool) faultSharedPause {
			return faultSharedPause{faultPause: faultPause{proc: proc, token: tok, stopped: 100, resumed: 200, overtaken: overtaken}, role: role}
		}
		run := faultSharedRun{
			ops: []faultOp{
				write(1, "k", 5, faultOK, 50), // before the pause
				write(1, "k", 5, faultStale, 210),
				read(2, "k", 4, 0, faultStale, 210),
				read(2, "k", 4, 0, faultStale, 220),
				write(3, "k#slot1", 8, faultStale, 230),
			},
			pauses: []faultSharedPause{pause(1, faultWriter, 5, true), pause(2, faultReader, 4, true), pause(3, faultPermit, 8, true),
				pause(4, faultPermit, 9, false)},
		}
		late, _, problems := faultLate(run)
		require.Empty(t, problems)
		require.Equal(t, map[string]int{faultWriter: 1, faultReader: 2, faultPermit: 1}, late)

		run.ops = append(run.ops, write(1, "k", 5, faultOK, 240), read(2, "k", 4, 4, faultOK, 240))
		run.pauses = append(run.pauses, pause(5, faultWriter, 6, true)) // made nothing late
		_, _, problems = faultLate(run)
		require.Len(t, problems, 3, "%q", problems)

		run.pauses = []faultSharedPause{pause(4, faultPermit, 9, false)}
		_, _, problems = faultLate(run)
		require.Len(t, problems, 1, "%q", problems) // no permit's pause overtaken
	})
}
