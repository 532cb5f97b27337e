-- srelease: give up one level of a read-write lock's or a semaphore's hold
-- (ARGV[7] "r"), or undo an acquisition whose caller gave up (ARGV[7]
-- "a"); at depth 0 the hold goes and the waiters it held back are admitted
-- (shared.lua's dispatch).
--
-- KEYS[1..3] the caller's hold, the queue, the counter (as sacquire.lua's)
-- KEYS[4]  the holders (sacquire.lua's KEYS[5]); KEYS[5] the writer's hold;
--          KEYS[6] the epoch
-- ARGV[1]  owner ID
-- ARGV[2]  release: the ownership's token; undo: ""
-- ARGV[3]  level ID
-- ARGV[4]  token mode (lib.lua), for the tokens of the waiters admitted
-- ARGV[5]  the kind: "r", "w" or "s"
-- ARGV[6]  undo: the caller's queue member, or ""
-- ARGV[7]  "r" (release) or "a" (undo)
--
-- A release returns the depth left when the ownership (owner and token)
-- holds it (0: released); -2 when the caller's own hold is gone (a reader
-- or a permit: a retried release, or one whose lease ran out) or, for a
-- writer, when the write lock is free and its token still the epoch; -1
-- otherwise. An undo leaves the queue and returns 1 when it took a level,
-- 0 when there was none. Errors: FOREIGN, OVERFLOW (lib.lua).
local M, err = modeOf(ARGV[4])
if not M then
  return err
end
local hold, kind, undo = KEYS[1], ARGV[5], ARGV[7] == 'a'
local o, ts, depth, granted = holdOf(hold, 'l:' .. ARGV[3], true)
if o == nil then
  return ts
end
if undo and ARGV[6] ~= '' then
  local gone, gerr = callOn('ZREM', KEYS[2], ARGV[6])
  if not gone then
    return gerr
  end
end
if o ~= ARGV[1] or not undo and ts ~= ARGV[2] then
  if undo then
    return 0
  elseif not o and (kind ~= 'w' or redis.call('GET', KEYS[6]) == ARGV[2]) then
    return -2 -- gone, or (a writer) no writer since: a retry, or expired
  end
  return -1
elseif not granted then
  return undo and 0 or depth
elseif depth > 1 then
  redis.call('HDEL', hold, 'l:' .. ARGV[3])
  return undo and 1 or depth - 1
end
redis.call('DEL', hold)
local K = {queue = KEYS[2], counter = KEYS[3], index = KEYS[4], writer = KEYS[5], epoch = KEYS[6]}
if kind ~= 'w' then
  redis.call(kind == 's' and 'HDEL' or 'SREM', K.index, ARGV[1])
end
if redis.call('EXISTS', K.queue) == 1 then
  local st, serr = sharedOf(K, kind)
  if not st then
    return serr
  end
  local ok, derr = dispatch(M, K, st, '', '1')
  if ok == nil then
    return derr
  end
end
return undo and 1 or 0
