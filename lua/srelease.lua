-- srelease: give up one level of a read-write lock's or a semaphore's hold,
-- or (ARGV[6] "a") undo an acquisition whose caller gave up; at depth 0 the
-- hold goes and the waiters it held back are admitted (shared.lua's
-- dispatch).
--
-- KEYS[1]  the base key (as sacquire.lua's)
-- KEYS[2]  the counter P:{N}:t (strict) or the floor P:{S}:f (time tokens)
-- KEYS[3]  the other mode's key, never there: declared (never read) so
--          that a Cluster moving the slot refuses the script (TRYAGAIN, a
--          declared key missing) for the whole move, as it does sacquire.
--          The keys named from KEYS[1] are not declared: run on either
--          node mid-move, the script would find some of them missing (the
--          importing node: a reader's hold not moved yet reads as absent)
--          or fail at one that moved (the migrating node: "non local key",
--          after its first writes)
-- ARGV[1]  owner ID
-- ARGV[2]  release: the ownership's token; undo: ""
-- ARGV[3]  level ID
-- ARGV[4]  token mode (lib.lua), for the tokens of the waiters admitted
-- ARGV[5]  the kind: "r", "w" or "s"
-- ARGV[6]  optional: "a" for an undo
-- ARGV[7]  undo: the caller's queue member, or ""
--
-- A release returns the depth left when the ownership (owner and token)
-- holds it (0: released); -2 when the caller's own hold is gone and, for
-- a reader or the writer, its token is still the epoch (no writer since):
-- a retried release, or one whose lease ran out; -1 otherwise. An undo
-- leaves the queue (the waiters it held back are admitted) and returns 1
-- when it took a level, 0 when there was none. Errors: FOREIGN, OVERFLOW
-- (lib.lua).
local M, err = modes[ARGV[4]], nil
if not M then
  M, err = modeOf(ARGV[4])
end
if not M then
  return err
end
local kind, undo, level = ARGV[5], ARGV[6] == 'a', 'l:' .. ARGV[3]
local K = sharedKeys(KEYS[1], kind, ARGV[1])
K.counter = KEYS[2]
local o, ts, depth, granted, _, q = holdOf(K.hold, level, true)
if o == nil then
  return ts
end
local left = false -- the undo took the caller's entry out of the queue
if undo and (ARGV[7] or '') ~= '' then
  local gone, gerr = callOn('ZREM', K.queue, ARGV[7])
  if not gone then
    return gerr
  end
  left = gone == 1
end
if undo and (o ~= ARGV[1] or not granted) then
  -- Nothing to release; a waiter that left may have held back those
  -- behind it (a writer, the readers after it): they go in now.
  if left then
    local ok, derr = readmit(M, K, kind)
    if not ok then
      return derr
    end
  end
  return 0
elseif o ~= ARGV[1] or ts ~= ARGV[2] then
  if not o and (kind == 's' or redis.call('GET', K.epoch) == ARGV[2]) then
    return -2 -- gone (a permit), or no writer since (RW): a retry, or expired
  end
  return -1
elseif not granted then
  return depth
elseif depth > 1 then
  redis.call('HDEL', K.hold, level)
  return undo and 1 or depth - 1
end
redis.call('DEL', K.hold)
if kind ~= 'w' then
  redis.call(kind == 's' and 'HDEL' or 'SREM', K.index, ARGV[1])
end
if q or undo then
  local ok, derr = readmit(M, K, kind)
  if not ok then
    return derr
  end
end
return undo and 1 or 0
