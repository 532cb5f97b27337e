-- acquire: take the lock if it is free, reenter it if the caller owns it.
--
-- KEYS[1]  lock hash   P:{N}        fields owner, count, token, req
-- KEYS[2]  counter     P:{N}:fence  plain integer, never expires
-- ARGV[1]  owner ID
-- ARGV[2]  lease TTL in milliseconds (positive integer)
-- ARGV[3]  request ID, unique per call; a re-run of the same call (go-redis
--          retries after a read timeout) is answered from the hash instead
--          of being applied twice
--
-- Returns {1, token, depth} when the caller holds the lock afterwards:
--   free -> held:   INCR the counter, token = new value, depth 1;
--   reentry:        same token, depth + 1, TTL reset to ARGV[2];
--   repeated call:  the stored token and depth, nothing changes.
-- Returns {0, pttl, 0} when another owner holds it; pttl is the holder's
-- remaining TTL in ms (-1 if the key has no TTL).
-- Error "WRONGTYPE <key>" when a key holds a foreign value; nothing written.
-- Error "OVERFLOW <key>" when the counter passed 2^53, beyond which Lua's
-- doubles cannot represent tokens exactly; the lock is not taken.
local h = redis.pcall('HMGET', KEYS[1], 'owner', 'count', 'token', 'req')
if h.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1])
end

if not h[1] then
  local t = redis.pcall('INCR', KEYS[2])
  if type(t) == 'table' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[2])
  end
  if t >= 9007199254740992 then
    return redis.error_reply('OVERFLOW ' .. KEYS[2])
  end
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', '1',
    'token', string.format('%d', t), 'req', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, t, 1}
end

if h[1] == ARGV[1] then
  local n = tonumber(h[2])
  if h[4] ~= ARGV[3] then
    n = n + 1
    redis.call('HSET', KEYS[1], 'count', string.format('%d', n), 'req', ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {1, tonumber(h[3]), n}
end

return {0, redis.call('PTTL', KEYS[1]), 0}
