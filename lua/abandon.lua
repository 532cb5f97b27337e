-- abandon: undo an acquire whose reply the caller never saw (its context
-- ended, or the connection broke, while the script may have run), or take a
-- waiter that gives up out of the queue.
--
-- KEYS[1]  lock hash   P:{N}     (layout in lib.lua)
-- KEYS[2]  wait queue  P:{N}:q   (layout in queue.lua)
-- KEYS[3]  counter     P:{N}:t in strict mode, else the floor P:{S}:f (lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  level ID: the request ID of the acquire to undo
-- ARGV[3]  the caller's queue member, or "" when it never queued
-- ARGV[4]  token mode for the token of a handed-over lock (lib.lua): "0"
--          the strict counter, "<ms>" time tokens
--
-- The member leaves the queue. Returns 1 when the owner holds the lock and
-- the level is there (taken by the request, or handed to the waiter and not
-- yet claimed): the level is removed, and when it was the last one the lock
-- is handed to the next waiter or freed, so nobody waits out a TTL.
-- Returns 0 when the request left no level (it never ran, was undone
-- already, or the hold has ended since): there is nothing to undo. Repeating
-- the call is harmless. A token issued and abandoned is never used.
-- Error "FOREIGN <key>" when a key holds a value this library did not write;
-- "OVERFLOW <key>" when the handed-over lock's token would reach 2^53;
-- "ERR malformed token mode" for a bad ARGV[4]. Nothing is written then.
local level = 'l:' .. ARGV[2]
local h, err, mode, us, now = begin(KEYS[1], ARGV[4], level, KEYS[3])
if not h then
  return err
end
if ARGV[3] ~= '' then
  local left, lerr = callOn('ZREM', KEYS[2], ARGV[3])
  if not left then
    return lerr
  end
end
if not h.held or h.o ~= ARGV[1] or not h.granted then
  return 0
end
if h.depth > 1 then
  redis.call('HDEL', KEYS[1], level)
  return 1
end
local done, perr = passOn(KEYS[1], KEYS[2], h, mode, us, now, false)
if not done then
  return perr
end
return 1
