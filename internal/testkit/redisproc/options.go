//go:build unix

package redisproc

// An Option configures a server started by [Start].
type Option func(*config)

type config struct {
	aof       bool
	fsync     string
	replicaOf *Server
	extra     []string
}

// WithAOF turns the append-only file on with the given appendfsync policy:
// "always", "everysec" or "no". By default the AOF is off, so a restarted
// server starts empty. [Start] fails the test on any other policy.
func WithAOF(fsync string) Option {
	return func(c *config) { c.aof, c.fsync = true, fsync }
}

// WithReplicaOf starts the server as a replica of primary (--replicaof). By
// default a server is a master. Start does not wait for the first sync; call
// [Server.WaitSync].
func WithReplicaOf(primary *Server) Option {
	return func(c *config) { c.replicaOf = primary }
}

// WithArgs appends extra redis-server arguments, such as
// "--maxmemory", "10mb". They come last, so they override the defaults; by
// default there are none. Arguments that move the server off loopback, its
// port or its directory break the package's guarantees.
func WithArgs(extra ...string) Option {
	return func(c *config) { c.extra = append(c.extra, extra...) }
}

// NoFunctionsArgs are the redis-server arguments that rename FUNCTION,
// FCALL and FCALL_RO away: the server answers them as unknown commands,
// as one without Functions (before Redis 7) would, and clients of it run
// their scripts with EVALSHA.
var NoFunctionsArgs = []string{
	"--rename-command", "FUNCTION", "",
	"--rename-command", "FCALL", "",
	"--rename-command", "FCALL_RO", "",
}

// WithoutFunctions starts a server without Functions ([NoFunctionsArgs]).
func WithoutFunctions() Option { return WithArgs(NoFunctionsArgs...) }
