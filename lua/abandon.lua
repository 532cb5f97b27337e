-- abandon: undo an acquire whose reply the caller never saw (its context
-- ended, or the connection broke, while the script may have run).
--
-- KEYS[1]  lock hash   P:{N}
-- ARGV[1]  owner ID
-- ARGV[2]  request ID of the acquire to undo
-- ARGV[3]  release channel P:{N}:released
--
-- Returns 1 when the hash shows that very request as the last one applied:
--   depth 1 (it was a fresh acquisition): DEL the hash, PUBLISH, so waiters
--          need not wait out the TTL;
--   depth > 1 (a reentry): count - 1, and the request ID is marked undone
--          so a repeat of this call cannot undo twice.
-- Returns 0 when it was not applied, or something else has happened to the
-- lock since (another request of the owner, expiry, another owner): then
-- there is nothing this call can safely undo. The fencing counter is never
-- touched: a token issued and abandoned is simply never used.
-- Error "WRONGTYPE <key>" when the lock key holds a foreign value.
local h = redis.pcall('HMGET', KEYS[1], 'owner', 'count', 'token', 'req')
if h.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1])
end
if h[1] ~= ARGV[1] or h[4] ~= ARGV[2] then
  return 0
end
local n = tonumber(h[2])
if n <= 1 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], h[3])
  return 1
end
redis.call('HSET', KEYS[1], 'count', string.format('%d', n - 1), 'req', 'undone:' .. ARGV[2])
return 1
