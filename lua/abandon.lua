-- abandon: undo an acquire whose reply was lost (context ended, connection
-- broken), or take a waiter that gives up out of the queue.
--
-- KEYS[1]  the hold     P:{N}    (lib.lua)
-- KEYS[2]  the queue    P:{N}:q  (queue.lua)
-- KEYS[3]  the counter  P:{N}:t (strict) or the floor P:{S}:f (time tokens)
-- ARGV[1]  owner ID
-- ARGV[2]  level ID: the request ID of the acquire to undo
-- ARGV[3]  the caller's queue member, or "" when it never queued
-- ARGV[4]  token mode (lib.lua), for the token of a lock handed on
--
-- The member leaves the queue (and is put back with its score if a
-- handoff is refused). Returns 1 when the owner holds the lock
-- with that level (taken by the request, handed to the waiter, or pending
-- on a Redlock node): the level goes, with the last one the lock is handed
-- on or freed. 0 when there is no such level. Repeating it is harmless.
-- Errors: FOREIGN, OVERFLOW (lib.lua), "ERR malformed token mode".
local M, err = modeOf(ARGV[4])
if not M then
  return err
end
local level = 'l:' .. ARGV[2]
local o, ts, depth, granted, _, q = holdOf(KEYS[1], level, true)
if o == nil then
  return ts
elseif ts and not tokenOf(KEYS[1], ts) then
  return redis.error_reply('FOREIGN ' .. KEYS[1])
end
local score, serr = false, nil
if ARGV[3] ~= '' then
  score, serr = callOn('ZSCORE', KEYS[2], ARGV[3])
  if score == nil then
    return serr
  elseif score then
    redis.call('ZREM', KEYS[2], ARGV[3])
  end
end
if o ~= ARGV[1] or not granted then
  return 0
elseif depth > 1 then
  redis.call('HDEL', KEYS[1], level)
  return 1
end
local ok, perr = passOn(M, KEYS[3], KEYS[1], KEYS[2], ts, q)
if not ok then
  if score then
    redis.call('ZADD', KEYS[2], score, ARGV[3])
  end
  return perr
end
return 1
