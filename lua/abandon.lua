-- abandon: undo an acquire whose reply the caller never saw (its context
-- ended, or the connection broke, while the script may have run).
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  level ID: the request ID of the acquire to undo
-- ARGV[3]  release channel P:{N}:released
--
-- Returns 1 when the owner holds the lock and the level is there: the level
-- is removed, and when it was the last one the hash is deleted and the
-- release published, so waiters need not wait out the TTL.
-- Returns 0 when the request left no level (it never ran, was undone
-- already, or the hold has ended since): there is nothing to undo. Repeating
-- the call is harmless. The fencing counter is never touched: a token
-- issued and abandoned is simply never used.
-- Error "FOREIGN <key>" when the lock key holds a value this library did
-- not write.
local h, err = lockOf(KEYS[1])
if h == nil then
  return err
end
if not h or h[1] ~= ARGV[1] or redis.call('HDEL', KEYS[1], 'l:' .. ARGV[2]) == 0 then
  return 0
end
if h[3] <= 1 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], h[2])
end
return 1
