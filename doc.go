// Package redfence is the root of a Go SDK for reentrant distributed locks on
// Redis that hand out fencing tokens, and for stores that refuse writes
// carrying an older token.
//
// The packages:
//
//   - reentrant: the lock client (owners, leases, reentry, renewal, waiting).
//   - fence: the token type and the rule every fenced store applies.
//   - storage: the fenced store interface, with adapters in storage/memory
//     (the reference), storage/redisstore and storage/sqlstore.
//   - lua: the Redis scripts behind the lock.
//
// This package itself holds no code; its tests (properties_test.go) check
// the whole system against models with property-based testing.
package redfence
