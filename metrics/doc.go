// Package metrics records what redfence locks and fenced stores do through
// the OpenTelemetry metric API. It is a separate package so that a program
// that does not import it pays nothing: package reentrant only calls an
// observer function when one is given.
//
//	m, err := metrics.New(otel.GetMeterProvider())
//	locks, err := reentrant.New(rdb, m.Option())
//	orders, err := redisstore.New(rdb)
//	store := m.Store("orders", orders)
//
// The instruments, all on the meter named [MeterName]:
//
//	name                          kind       unit           attributes
//	redfence.lock.acquisitions    counter    {acquisition}  outcome
//	redfence.lock.wait            histogram  s              outcome
//	redfence.lock.renewals        counter    {renewal}      outcome
//	redfence.lock.lost            counter    {lease}        -
//	redfence.lock.releases        counter    {release}      -
//	redfence.store.stale_refused  counter    {write}        store
//
// What each one counts:
//
//   - redfence.lock.acquisitions: Lock and TryLock calls. outcome is
//     "acquired" (a new ownership), "reentered" (its owner went one level
//     deeper) or "not_acquired" (the call returned an error: held by
//     another owner, context ended, Redis error, bad argument...).
//   - redfence.lock.wait: how long each of those calls took, in seconds,
//     with the same outcome. The advised bucket boundaries run from 1 ms to
//     60 s (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
//     30, 60); an SDK view may override them.
//   - redfence.lock.renewals: renewals of held leases. outcome is "ok" or
//     "failed" (no answer or an error; the lease is lost only if no renewal
//     succeeds before its deadline).
//   - redfence.lock.lost: ownerships that ended without Unlock.
//   - redfence.lock.releases: Unlocks that released a lock (its last level;
//     unlocking an inner level is not counted).
//   - redfence.store.stale_refused: writes a fenced store refused for a
//     stale token (errors.Is(err, fence.ErrStale)): Put and Delete through
//     [Metrics.Store], and the errors given to [Metrics.Stale], such as
//     sqlstore's Guard errors. store is the name given there.
//
// A read-write lock's leases and a semaphore's permits (reentrant.RWMutex,
// reentrant.Semaphore) are counted on the same instruments, with the
// attribute lock.hold ([HoldKey]): "read", "write" or "permit"; a plain
// lock's measurements have none, so existing dashboards count locks alone
// by filtering on its absence, or everything by ignoring it.
//
// Lock names are not attributes by default: there may be one per customer
// or per row, and every distinct attribute set is a time series that the
// SDK and the backend keep. [WithLockNameAttribute] adds "lock.name" to every
// lock instrument when the names are few and known. [WithAttributes] adds
// fixed attributes to every instrument.
package metrics
