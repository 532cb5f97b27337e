// Package lua holds the Redis scripts behind redfence's locks: the .lua
// files of this directory, embedded in [FS], and nothing else. Each file's
// header gives its KEYS, ARGV and every reply; lib.lua describes the keys
// of a lock and what each field of its hash means, queue.lua the wait
// queue: helpers that the other files' scripts are run with. The module's internal/scripts builds
// one Functions library and one EVALSHA script per script file from them,
// and the lock client (package reentrant) is the only way the module runs
// them: a script run by hand with wrong arguments can break a lock's
// promises.
// docs/design.md ("Scripts") says what an operator sees in FUNCTION LIST.
package lua

import "embed"

// FS holds the scripts, *.lua at its root.
//
//go:embed *.lua
var FS embed.FS
