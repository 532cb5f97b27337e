package s3store

// WithUnconditional makes every write a plain PUT, without If-Match or
// If-None-Match: the planted fault the conformance suite must catch.
func WithUnconditional() Option {
	return func(c *config) error { c.unconditional = true; return nil }
}

// WithAttemptsHook has f told, after each write that was accepted or
// refused as stale, how many rounds (HEAD and PUT) it made.
func WithAttemptsHook(f func(rounds int)) Option {
	return func(c *config) error { c.attempts = f; return nil }
}
