package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redfence/redfence/fence"
	"github.com/redfence/redfence/reentrant"
	"github.com/redfence/redfence/storage"
)

// playRW runs the read-write lock's pause scenario (demo --rw) and, as
// playPause does, returns an error if any step does not turn out as
// fencing promises:
//
//  1. Writer A takes the write lease of a reentrant.RWMutex and writes; it
//     is paused past its lease. Writer B takes the write lease with a
//     higher token and writes. A resumes and writes with its old token:
//     the store refuses it.
//  2. Reader R takes a read lease: its token is its epoch, B's token (the
//     last write lease granted before it). It reads with storage.GetAt at
//     that epoch: B's record. R is paused past its lease. Writer C takes
//     the write lease and writes. R resumes and reads again at its epoch:
//     GetAt refuses the record C wrote.
func playRW(ctx context.Context, w io.Writer, newLock func(...reentrant.ClientOption) (*reentrant.Client, error), prefix string, store storage.Store, where, storeName string) error {
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := "report-" + hex.EncodeToString(b[:])
	resource := "reports/" + name

	// A and R are the paused ones. A real pause freezes the renewal
	// goroutine too, so their clients do not renew: their leases run out
	// while they sleep.
	paused, err := newLock(reentrant.WithPrefix(prefix), reentrant.WithTTL(leaseTTL), reentrant.WithoutRenewal())
	if err != nil {
		return err
	}
	defer paused.Close()
	others, err := newLock(reentrant.WithPrefix(prefix), reentrant.WithTTL(leaseTTL))
	if err != nil {
		return err
	}
	defer others.Close()
	rwA, rwR, rw := paused.RWMutex(name), paused.RWMutex(name), others.RWMutex(name)

	fmt.Fprintf(w, "redfence demo --rw: read-write lock %q (key prefix %q) on %s, writes and fenced reads of %q in %s\n", name, prefix, where, resource, storeName)
	fmt.Fprintf(w, "Leases are %v; writer A and reader R will each be paused for %v.\n\n", leaseTTL, pause)
	tl := &timeline{w: w, start: time.Now()}
	put := func(who string, ctx context.Context, value string, tok fence.Token) error {
		if err := store.Put(ctx, resource, []byte(value), tok); err != nil {
			return fmt.Errorf("%s's write: %w", who, err)
		}
		tl.say(who, "wrote %q with token %d: accepted", value, tok)
		return nil
	}

	// Act 1: a paused writer.
	a, err := rwA.Lock(ctx)
	if err != nil {
		return err
	}
	tokA := a.Token()
	tl.say("A", "took the write lease: token %d", tokA)
	if err := put("A", a.Context(), "v1 by A", tokA); err != nil {
		return err
	}
	tokB, err := pausedWhile(ctx, tl, "A", "it still believes it holds the write lease", func() (fence.Token, error) {
		return writeAfter(ctx, tl, rw, "B", "A holds it", "A's lease ran out", put, "v2 by B")
	})
	if err != nil {
		return err
	}
	// A's context still carries its token (a request on its way when A
	// froze), though its lease ended: only the store can refuse it.
	err = store.Put(context.WithoutCancel(a.Context()), resource, []byte("late by A"), tokA)
	switch {
	case isStale(err):
		tl.say("A", "wrote %q with token %d: REFUSED (%v)", "late by A", tokA, err)
	case err == nil:
		return unsafef("the store ACCEPTED A's late write with token %d after B wrote with %d", tokA, tokB)
	default:
		return fmt.Errorf("A's late write: %w", err)
	}
	if err := lostUnlock(ctx, tl, "A", a); err != nil {
		return err
	}

	// Act 2: a paused reader.
	r, err := rwR.RLock(ctx)
	if err != nil {
		return err
	}
	epoch := r.Token()
	tl.say("R", "took a read lease: epoch %d, the token of the last write lease granted (B's)", epoch)
	if epoch != tokB {
		return unsafef("R's read lease has epoch %d, want B's token %d, the last write lease granted before it", epoch, tokB)
	}
	rec, err := storage.GetAt(r.Context(), store, resource, epoch)
	if err != nil {
		return fmt.Errorf("R's read at epoch %d: %w", epoch, err)
	}
	tl.say("R", "read %q (written with token %d) at epoch %d: current", rec.Value, rec.Token, epoch)
	if string(rec.Value) != "v2 by B" {
		return unsafef("R read %q at epoch %d, want B's %q", rec.Value, epoch, "v2 by B")
	}
	tokC, err := pausedWhile(ctx, tl, "R", "it still believes what it reads is current", func() (fence.Token, error) {
		return writeAfter(ctx, tl, rw, "C", "R holds a read lease", "R's lease ran out", put, "v3 by C")
	})
	if err != nil {
		return err
	}
	rec, err = storage.GetAt(context.WithoutCancel(r.Context()), store, resource, epoch)
	switch {
	case isStale(err):
		tl.say("R", "read at epoch %d: REFUSED (%v)", epoch, err)
	case err == nil:
		return unsafef("GetAt at epoch %d RETURNED %q (token %d) after C wrote with token %d", epoch, rec.Value, rec.Token, tokC)
	default:
		return fmt.Errorf("R's late read: %w", err)
	}
	if err := lostUnlock(ctx, tl, "R", r); err != nil {
		return err
	}

	rec, err = store.Get(ctx, resource)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nThe store holds %q, written with token %d.\n", rec.Value, rec.Token)
	if string(rec.Value) != "v3 by C" || rec.Token != tokC || !(tokA < tokB && tokB < tokC) {
		return unsafef("the store holds %q with token %d, want C's write with token %d, and tokens rising from A (%d) to B (%d) to C",
			rec.Value, rec.Token, tokC, tokA, tokB)
	}
	fmt.Fprintln(w, "Two writers believed they held the write lease at once; the fencing token kept A's late write out.")
	fmt.Fprintln(w, "The paused reader's epoch was older than the record; GetAt refused its late read instead of returning what C had replaced.")
	return nil
}

// pausedWhile has who paused (slept) for the demo's pause while meanwhile
// runs, and returns what meanwhile returned once both are over.
func pausedWhile(ctx context.Context, tl *timeline, who, belief string, meanwhile func() (fence.Token, error)) (fence.Token, error) {
	type result struct {
		token fence.Token
		err   error
	}
	done := make(chan result, 1)
	go func() {
		tok, err := meanwhile()
		done <- result{tok, err}
	}()
	tl.say(who, "is paused (a stop-the-world GC, a page fault, SIGSTOP) for %v...", pause)
	select {
	case <-time.After(pause):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	tl.say(who, "resumes; %s", belief)
	select {
	case r := <-done:
		return r.token, r.err
	case <-time.After(10 * time.Second):
		return 0, errors.New("the other writer never got the write lease")
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// writeAfter has writer who wait for the write lease of rw (held as held
// says), write value with its token, and unlock; it returns the token.
func writeAfter(ctx context.Context, tl *timeline, rw *reentrant.RWMutex, who, held, why string,
	put func(string, context.Context, string, fence.Token) error, value string) (fence.Token, error) {
	tl.say(who, "wants the write lease; waits (%s)", held)
	l, err := rw.Lock(ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", who, err)
	}
	defer func() { _ = l.Unlock(context.WithoutCancel(ctx)) }()
	tl.say(who, "took the write lease: token %d (%s)", l.Token(), why)
	if err := put(who, l.Context(), value, l.Token()); err != nil {
		return 0, err
	}
	tl.say(who, "unlocks")
	return l.Token(), nil
}

// lostUnlock unlocks who's lease, which ran out while who was paused: the
// unlock must say it was not held.
func lostUnlock(ctx context.Context, tl *timeline, who string, l *reentrant.Lease) error {
	err := l.Unlock(ctx)
	switch {
	case err == nil:
		return unsafef("%s's unlock after losing the lease succeeded, want ErrNotHeld", who)
	case !errors.Is(err, reentrant.ErrNotHeld):
		return fmt.Errorf("%s's unlock: %w", who, err)
	}
	tl.say(who, "unlock: %v", err)
	return nil
}
