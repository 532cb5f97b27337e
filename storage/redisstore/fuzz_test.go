package redisstore_test

import (
	"testing"

	"github.com/redfence/redfence/internal/testenv"
	"github.com/redfence/redfence/storage/redisstore"
	"github.com/redfence/redfence/storage/storagetest"
)

// FuzzStore sends arbitrary keys (any bytes, braces and NULs included),
// values and tokens to the Redis store on miniredis and checks every answer
// against the in-memory reference.
func FuzzStore(f *testing.F) {
	f.Add(byte(0), "k", []byte("v"), uint64(1))
	f.Add(byte(2), "{a}", []byte{}, uint64(5))
	f.Add(byte(1), "%7B}{", []byte{0, 1}, uint64(1<<63))
	f.Add(byte(0), "\x00", []byte("x"), uint64(0))
	_, rdb := testenv.Mini(f)
	s, err := redisstore.New(rdb)
	if err != nil {
		f.Fatal(err)
	}
	z := storagetest.NewFuzzer(s)
	f.Fuzz(func(t *testing.T, op byte, key string, value []byte, tok uint64) {
		z.Step(t, op, key, value, tok)
	})
}
