-- release: give up one level of the hold; at depth 0 hand the lock to the
-- oldest waiter, or free it.
--
-- KEYS[1]  the hold     P:{N}    (lib.lua); the queue P:{N}:q (queue.lua)
--          and the forced-unlock record P:{N}:u are named from it
-- KEYS[2]  the counter  P:{N}:t (strict) or the floor P:{S}:f (time tokens)
-- ARGV[1]  owner ID
-- ARGV[2]  the ownership's token
-- ARGV[3]  level ID: the request ID of the Lock call that took the level
-- ARGV[4]  token mode (lib.lua), for the token of a lock handed on
-- ARGV[5]  optional: a channel to PUBLISH an empty message on when this
--          call frees a lock someone was refused (q: a Redlock's pollers)
--
-- Returns the depth left when the ownership (owner and token) holds the
-- lock (a level already gone, as after a retry, is not taken twice); at
-- 0 the lock went to the oldest waiter (one message) or is free.
-- -2 when the name is free and no token was issued on its counter since
-- this ownership's (what a retry finds after its first attempt freed the
-- lock); {-1, by, ms} when a forced unlock ended the ownership; -1
-- otherwise. Nothing is written in those three cases.
-- Errors: FOREIGN, OVERFLOW (lib.lua), "ERR malformed token mode".
local level = 'l:' .. ARGV[3]
local o, ts, depth, granted, _, q = holdOf(KEYS[1], level, true)
if o == nil then
  return ts
elseif o == ARGV[1] and ts == ARGV[2] then
  if not granted then
    return depth
  elseif depth > 1 then
    redis.call('HDEL', KEYS[1], level)
    return depth - 1
  end
  local M, err = modes[ARGV[4]], nil
  if not M then
    M, err = modeOf(ARGV[4])
  end
  if not M then
    return err
  end
  local ok, perr = passOn(M, KEYS[2], KEYS[1], KEYS[1] .. ':q', ts, q)
  if not ok then
    return perr
  end
  if ARGV[5] and q then
    redis.call('PUBLISH', ARGV[5], '')
  end
  return 0
end
-- The ownership has ended: say how, as far as Redis knows.
local f, ferr = forcedOf(KEYS[1] .. ':u')
if f == nil then
  return ferr
elseif f and f.token == ARGV[2] then
  return {-1, f.by, f.at}
elseif not o then
  local c, cerr = counterOf(KEYS[2])
  if not c then
    return cerr
  elseif dec(c) == ARGV[2] then
    return -2
  end
end
return -1
