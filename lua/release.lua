-- release: give up one level of the hold; at depth 0 hand the lock to the
-- oldest waiter, or free it when nobody waits.
--
-- KEYS[1]  lock hash   P:{N}     (layout in lib.lua)
-- KEYS[2]  wait queue  P:{N}:q   (layout in queue.lua)
-- KEYS[3]  counter     P:{N}:t in strict mode, else the floor P:{S}:f (lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  token of the ownership being released (decimal)
-- ARGV[3]  level ID: the request ID of the Lock call that took the level
-- ARGV[4]  token mode for the token of a handed-over lock (lib.lua): "0"
--          the strict counter, "<ms>" time tokens
-- ARGV[5]  optional: a channel to PUBLISH an empty message on when this
--          call frees the lock (a Redlock node's waiters listen there)
--
-- Returns the depth left (>= 0) when the caller's ownership held the level:
--   other levels left:  the level is removed, their count returned;
--   last level:         the lease and level are removed, and the lock
--                       handed to the oldest waiter if any (one PUBLISH or
--                       SPUBLISH, to that waiter's channel only); 0;
--   repeated call:      the level is already gone, so nothing changes and
--                       the depth left is returned, 0 when the ownership
--                       has ended by release, whatever the owner did in
--                       between (see "Retries" in lib.lua).
-- Returns -1 when the caller's ownership does not hold the lock: its lease
-- ran out (the lock is then freed and handed on, if that was not done yet),
-- the lock is held by another owner, the ownership was forced
-- (force.lua), the token is not one this incarnation of the hash issued
-- (its hash was deleted) nor one a living record of a stowed incarnation
-- (lib.lua) holds, or it is too old to tell (lib.lua). The reply for an ownership that has ended
-- trusts the caller to have held it: it does not check the owner of any
-- but the last ownership.
-- Error "FOREIGN <key>" when a key holds a value this library did not write;
-- "OVERFLOW <key>" when the handed-over lock's token would reach 2^53;
-- "ERR malformed token mode" for a bad ARGV[4]. Nothing is written then.
local quick, read = quickRelease(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
if quick then
  return quick
end
local level = 'l:' .. ARGV[3]
local h, err, mode, us, now = begin(KEYS[1], ARGV[4], level, KEYS[3], read)
if not h then
  return err
end
if not canonical(ARGV[2]) then
  return -1
end

if h.x and h.ts == ARGV[2] then
  if h.o ~= ARGV[1] then
    return -1
  end
  if not h.held then
    local done, perr = passOn(KEYS[1], KEYS[2], h, mode, us, now, true)
    if not done then
      return perr
    end
    return -1
  end
  if not h.granted then
    return h.depth
  end
  if h.depth > 1 then
    redis.call('HDEL', KEYS[1], level)
    return h.depth - 1
  end
  local done, perr = passOn(KEYS[1], KEYS[2], h, mode, us, now, false)
  if not done then
    return perr
  end
  if ARGV[5] then
    redis.pcall('PUBLISH', ARGV[5], '')
  end
  return 0
end

-- The ownership has ended (or never was): by release, unless it expired or
-- is not of this incarnation. With time tokens, an ownership of an
-- incarnation that was stowed (no hash, or one of a later incarnation) is
-- answered by that incarnation's record, when it lives.
local t = tonumber(ARGV[2])
if mode > 0 and (not h.exists or (h.b and t < h.b)) then
  local r, rerr = recordFor(KEYS[1], KEYS[3], t, h.rec)
  if r == nil then
    return rerr
  end
  if r and (t < r.t or r.o == ARGV[1]) then
    return 0
  end
  return -1
end
if not h.exists or t > h.t or (h.b and t < h.b) or (h.w and t <= h.w)
    or h.expired[ARGV[2]] or (t == h.t and h.o ~= ARGV[1]) then
  return -1
end
return 0
