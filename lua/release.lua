-- release: undo one acquisition; free the lock when the depth reaches 0.
--
-- KEYS[1]  lock hash   P:{N}
-- KEYS[2]  tombstone   P:{N}:rel:<request ID>, set by a full release so a
--          repeat of this very request is recognised as done. One key per
--          request: a shared key would be overwritten when another owner
--          takes and fully releases the lock before go-redis's retry lands.
-- ARGV[1]  owner ID
-- ARGV[2]  token of the ownership being released (decimal)
-- ARGV[3]  request ID, unique per call (see acquire.lua)
-- ARGV[4]  release channel P:{N}:released
-- ARGV[5]  tombstone TTL in milliseconds: how long a repeated full release
--          is still recognised as already done
--
-- Returns the depth left (>= 0) when the caller held the lock:
--   depth > 1:      count - 1 and the hash remembers the request;
--   depth 1:        DEL the hash, SET the tombstone, PUBLISH the token, 0;
--   repeated call:  the same answer as the first run, nothing changes.
-- Returns -1 when the caller does not hold this ownership: the lock is free,
-- expired, or held by another owner or by a later ownership (other token).
-- Error "WRONGTYPE <key>" when the lock key holds a foreign value.
local h = redis.pcall('HMGET', KEYS[1], 'owner', 'count', 'token', 'req')
if h.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1])
end

if h[1] == ARGV[1] and h[3] == ARGV[2] then
  local n = tonumber(h[2])
  if h[4] == ARGV[3] then
    return n
  end
  if n > 1 then
    redis.call('HSET', KEYS[1], 'count', string.format('%d', n - 1), 'req', ARGV[3])
    return n - 1
  end
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[5])
  redis.call('PUBLISH', ARGV[4], ARGV[2])
  return 0
end

if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
return -1
