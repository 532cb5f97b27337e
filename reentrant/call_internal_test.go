package reentrant

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// An error reply proves a script did not run, unless it came after the
// script granted the lock (a poll's WAIT): that level must be undone.
func TestMayHaveRunAfterAGrant(t *testing.T) {
	var reply error = replyError("ERR WAIT cannot be used with replica instances")
	if mayHaveRun(reply, false) {
		t.Fatal("an error reply alone proves the command did not run")
	}
	if !mayHaveRun(&grantedError{reply}, false) {
		t.Fatal("an error after the grant leaves a level to undo")
	}
	var r redis.Error
	if !errors.As(&grantedError{reply}, &r) {
		t.Fatal("the server's error must stay reachable with errors.As")
	}
}

// replyError is an error reply as go-redis types them.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}
