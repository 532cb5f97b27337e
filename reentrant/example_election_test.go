package reentrant_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redfence/redfence/reentrant"
)

// An election: one candidate leads, another waits; a term's token fences
// the leader's writes, and Resign hands leadership on.
func ExampleClient_Campaign() {
	locks, stop := newLocks()
	defer stop()
	ctx := context.Background()
	a, err := locks.Campaign(ctx, "scheduler", "node-a")
	if err != nil {
		log.Fatal(err)
	}
	leader, err := locks.Leader(ctx, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", leader.Value, "term token is a's:", leader.Token == a.Token())

	won := make(chan string)
	go func() {
		b, err := locks.Campaign(ctx, "scheduler", "node-b") // waits for a's term to end
		if err != nil {
			log.Fatal(err)
		}
		won <- fmt.Sprint("b leads with a higher token: ", b.Token() > a.Token())
		_ = b.Resign(ctx)
	}()
	_ = a.Proclaim(ctx, "node-a (draining)")
	_ = a.Resign(ctx)
	fmt.Println(<-won)
	// Output:
	// leader: node-a term token is a's: true
	// b leads with a higher token: true
}

// An election as a scheduler's elector (gocron's Elector has the method
// IsLeader(ctx) error): one goroutine campaigns for this instance, again
// after each term ends, and isLeader answers from the current term, with
// no Redis call.
func ExampleClient_Campaign_isLeader() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	locks, err := reentrant.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var current atomic.Pointer[reentrant.Term]
	isLeader := func(context.Context) error { // an Elector's IsLeader
		if t := current.Load(); t != nil && t.Err() == nil {
			return nil
		}
		return errors.New("not the leader")
	}
	go func() {
		for ctx.Err() == nil {
			term, err := locks.Campaign(ctx, "jobs", "this-host")
			if err != nil { // ctx ended, or Redis failed: campaign again soon
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			current.Store(term)
			select {
			case <-term.Context().Done():
			case <-ctx.Done():
				_ = term.Resign(context.Background())
			}
		}
	}()
	for isLeader(ctx) != nil {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("leader: run the jobs")
	// Output: leader: run the jobs
}
