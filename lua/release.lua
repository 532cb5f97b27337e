-- release: give up one level of the hold; at depth 0 hand the lock to the
-- oldest waiter, or free it when nobody waits.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- KEYS[2]  tombstone   P:{N}:rel:<level ID>, set by the release of the last
--          level, so that a repeat of that release is recognised as done.
--          One key per level: a shared key would be overwritten when
--          another owner takes and fully releases the lock before
--          go-redis's retry lands. Its value, "<token> <owner>", says whose
--          release it was; it expires after ARGV[4] ms.
-- KEYS[3]  counter     P:{N}:fence, for the token of a handed-over lock
-- KEYS[4]  wait queue  P:{N}:q   (layout in lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  token of the ownership being released (decimal)
-- ARGV[3]  level ID: the request ID of the Lock call that took the level
-- ARGV[4]  tombstone TTL in milliseconds
-- ARGV[5]  token mode for the token of a handed-over lock (lib.lua): "0"
--          the strict counter, "<ms>" time tokens whose counter expires
--          <ms> after the last token issued
--
-- Returns the depth left (>= 0) when the caller's ownership held the level:
--   other levels left:  the level is removed, their count returned;
--   last level:         the hash is deleted, the tombstone set, and the
--                       lock handed to the oldest waiter if any (one
--                       PUBLISH, to that waiter's channel only); 0;
--   repeated call:      the level is already gone, so nothing changes and
--                       the current depth (or 0 from the tombstone) is
--                       returned, whatever the owner did in between.
-- Returns -1 when the caller does not hold this ownership: the lock is free,
-- expired, or held by another owner or by a later ownership (other token).
-- Error "FOREIGN <key>" when a key holds a value this library did not write;
-- "OVERFLOW <key>" when the handed-over lock's token would reach 2^53;
-- "ERR malformed token mode" for a bad ARGV[5]. Nothing is written then.
local mode, merr = modeOf(ARGV[5])
if not mode then
  return merr
end
local level = 'l:' .. ARGV[3]
local h, err = lockOf(KEYS[1], level)
if h == nil then
  return err
end

if h and h[1] == ARGV[1] and h[2] == ARGV[2] then
  if not h[4] then
    return h[3]
  end
  if h[3] > 1 then
    redis.call('HDEL', KEYS[1], level)
    return h[3] - 1
  end
  local done, perr = passOn(KEYS[1], KEYS[3], KEYS[4], mode)
  if not done then
    return perr
  end
  redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. ARGV[1], 'PX', ARGV[4])
  return 0
end

local tomb, terr = tombstoneOf(KEYS[2])
if tomb == nil then
  return terr
end
if tomb == ARGV[2] .. ' ' .. ARGV[1] then
  return 0
end
return -1
