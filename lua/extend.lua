-- extend: keep the caller's ownership alive for at least a new TTL.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  token of the ownership being extended (decimal)
-- ARGV[3]  TTL in milliseconds, counted from now
--
-- Returns 1 when the caller's ownership (owner and token) holds the lock;
-- its TTL is then ARGV[3] or, if the lock already expired later than that,
-- unchanged: extending never shortens, so one level or the renewal cannot
-- cut the lease another level relies on. Returns 0 when the ownership does
-- not hold the lock (free, expired, another owner, or a later ownership by
-- the same owner). Repeating the call is harmless.
-- Error "FOREIGN <key>" when the lock key holds a value this library did
-- not write.
local h, err = lockOf(KEYS[1])
if h == nil then
  return err
end
if h and h[1] == ARGV[1] and h[2] == ARGV[2] then
  keepAtLeast(KEYS[1], ARGV[3])
  return 1
end
return 0
