-- inspect: an atomic snapshot of one lock, for tools and tests. Read-only.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- KEYS[2]  counter     P:{N}:fence
-- KEYS[3]  wait queue  P:{N}:q
--
-- Returns {owner, token, pttl, counter, levels, waiters}: owner and token
-- as stored, false (nil in Go) when the lock is free; pttl an integer (-2
-- free, -1 no TTL); counter the last token ever issued, 0 if none was
-- (in time mode the counter may have expired idle, or while a renewed
-- lock was held: then the held token, or 0 when free);
-- levels the IDs of the live levels (empty when free); waiters the number
-- of Lock calls queued.
-- Error "FOREIGN <key>" when a key holds a value this library did not write.
local h, err = lockOf(KEYS[1])
if h == nil then
  return err
end
local c, cerr = counterOf(KEYS[2])
if c == nil then
  return cerr
end
local n, nerr = callOn('ZCARD', KEYS[3])
if not n then
  return nerr
end
if not h then
  return {false, false, -2, c, {}, n}
end
return {h[1], h[2], redis.call('PTTL', KEYS[1]), math.max(c, tonumber(h[2])), h[5], n}
