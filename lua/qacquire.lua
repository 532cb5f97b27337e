-- qacquire: phase 1 of a Redlock acquisition on one node: take the lock if
-- it is free, its hold pending (no token yet), or reenter it if the
-- caller owns it. Redlock waiters do not queue: they poll.
--
-- KEYS[1]  the hold     P:{N}    (lib.lua)
-- KEYS[2]  the counter  P:{N}:t  (a Redlock node's tokens are strict)
-- KEYS[3]  the node's join record P:j: when (server ms) the node was
--          first found without one: empty (new, restarted bare, flushed)
-- ARGV[1]  owner ID
-- ARGV[2]  lease in ms (canonical decimal)
-- ARGV[3]  level ID (as acquire.lua's)
-- ARGV[4]  metadata of a fresh ownership ("" for none)
-- ARGV[5]  the deepest hold a reentry may make
-- ARGV[6]  the rejoin delay in ms: how long after it was found empty the
--          node votes in no majority (the longest lease, plus drift)
-- ARGV[7]  optional: a proposed token, sent by a client whose owner holds
--          the lock on no node yet
--
-- Returns {1, token, depth}: the caller's ownership holds the lock here
-- with its token (a reentry, or a repeat: the depth its level was granted
-- at); the lease is raised to ARGV[2] from now if it ended sooner.
-- {3, counter, depth, µs}: the caller holds it here pending (a fresh take,
-- or a reentry or repeat of a hold still pending), counter being the
-- node's (0 if none) and µs its clock: the client picks the token from a
-- majority's counters and clocks and raises it (qraise.lua).
-- {5, token, 1, µs}: the lock was free here and the proposal is above the
-- counter and within 5 ms of the node's clock, either way: the caller
-- holds it with that token, the counter raised to it (no phase 2 here).
-- {2, token, depth}: a new level would pass ARGV[5]; nothing is written.
-- {0, pttl, 0}: another owner holds it (its hold's q set: see release).
-- {4, wait, 0}: the node is joining (it had no join record, written now,
-- or got it less than ARGV[6] ago): it may have forgotten leases it
-- granted, and votes for nobody for wait more ms. Nothing else is done.
-- Errors: FOREIGN (lib.lua), "ERR malformed ...".
--
-- A proposal may be 5 ms at most from the node's clock, either way, so
-- that a token stays near the clocks of the majority that took it, which
-- the clock floor's argument needs (docs/redlock.md, "A node that restarts empty").
local delay, proposal = ARGV[6], ARGV[7] or ''
if not canonical(delay) or not lease(ARGV[2]) then
  return redis.error_reply('ERR malformed lease or rejoin delay')
elseif proposal ~= '' and not canonical(proposal) then
  return redis.error_reply('ERR malformed proposed token')
end
local us = tonumber(clock())
local vs, verr = strings(KEYS[3], KEYS[2])
if not vs then
  return verr
end
local wait, jerr = joining(KEYS[3], vs[1], math.floor(us / 1000), tonumber(delay))
if wait ~= 0 then
  return wait and {4, wait, 0} or jerr
end
local level = 'l:' .. ARGV[3]
local o, ts, depth, granted, _, q = holdOf(KEYS[1], level, true)
if o == nil then
  return ts
end
local c, cerr = 0, nil
if vs[2] then
  c, cerr = tokenOf(KEYS[2], vs[2])
end
if not c then
  return cerr
elseif o == ARGV[1] then
  local t, d, terr, derr = c, depth + 1, nil, nil
  if ts then
    t, terr = tokenOf(KEYS[1], ts)
  end
  if granted then
    d, derr = tokenOf(KEYS[1], granted)
  end
  if not t or not d then
    return terr or derr
  elseif not granted and depth >= tonumber(ARGV[5]) then
    return {2, t, depth}
  end
  redis.call('HSET', KEYS[1], level, dec(d))
  stretch(KEYS[1], ARGV[2])
  return ts and {1, t, d} or {3, c, d, us}
elseif o then
  if not q then -- its release wakes the pollers
    redis.call('HSET', KEYS[1], 'q', '1')
  end
  return {0, redis.call('PTTL', KEYS[1]), 0}
end
local p = tonumber(proposal)
local taken = p and p > c and math.abs(p - us) <= 5000 and p < 9007199254740992
local fields = {'o', ARGV[1], level, '1'}
if ARGV[4] ~= '' then fields[5], fields[6] = 'm', ARGV[4] end
if taken then
  fields[#fields + 1], fields[#fields + 2] = 't', proposal
  redis.call('SET', KEYS[2], proposal)
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return taken and {5, p, 1, us} or {3, c, 1, us}
