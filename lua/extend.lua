-- extend: reset the lease of the caller's ownership to a new TTL.
--
-- KEYS[1]  lock hash   P:{N}
-- ARGV[1]  owner ID
-- ARGV[2]  token of the ownership being extended (decimal)
-- ARGV[3]  new TTL in milliseconds, counted from now
--
-- Returns 1 when the caller's ownership (owner and token) holds the lock and
-- its TTL is now ARGV[3]; 0 when it does not (free, expired, another owner,
-- or a later ownership by the same owner). Repeating the call is harmless:
-- it sets the same TTL again, so it needs no request ID.
-- Error "WRONGTYPE <key>" when the lock key holds a foreign value.
local h = redis.pcall('HMGET', KEYS[1], 'owner', 'token')
if h.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1])
end
if h[1] == ARGV[1] and h[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
