-- acquire: take the lock if it is free, reenter it if the caller owns it.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- KEYS[2]  counter     P:{N}:fence, a canonical decimal, never expires
-- ARGV[1]  owner ID
-- ARGV[2]  lease TTL in milliseconds (positive integer)
-- ARGV[3]  level ID: the request ID of this call, unique per Lock call. A
--          re-run of the same call (go-redis retries after a read timeout)
--          finds its level and is answered without applying twice.
--
-- Returns {1, token, depth} when the caller holds the lock afterwards:
--   free -> held:   counter + 1 is the token, depth 1, TTL ARGV[2];
--   reentry:        same token, one more level, the TTL raised to ARGV[2]
--                   if it was lower (never shortened);
--   repeated call:  the stored token and the depth that level was granted
--                   at (the value of its field), nothing changes.
-- Returns {0, pttl, 0} when another owner holds it; pttl is the holder's
-- remaining TTL in ms (-1 if the key has no TTL).
-- Error "FOREIGN <key>" when a key holds a value this library did not
-- write; "OVERFLOW <key>" when the next token would reach 2^53, beyond
-- which Lua's doubles are not exact. Nothing is written in either case.
-- Any other error is the server's own (OOM, READONLY...), passed on.
local h, err = lockOf(KEYS[1])
if h == nil then
  return err
end
local level = 'l:' .. ARGV[3]

if not h then
  local c, cerr = counterOf(KEYS[2])
  if c == nil then
    return cerr
  end
  local t = c + 1
  if t >= 9007199254740992 then
    return redis.error_reply('OVERFLOW ' .. KEYS[2])
  end
  local ts = string.format('%d', t)
  redis.call('SET', KEYS[2], ts)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', ts, level, '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, t, 1}
end

if h[1] == ARGV[1] then
  local granted = redis.call('HGET', KEYS[1], level)
  if granted then
    return {1, tonumber(h[2]), tonumber(granted)}
  end
  redis.call('HSET', KEYS[1], level, string.format('%d', h[3] + 1))
  keepAtLeast(KEYS[1], ARGV[2])
  return {1, tonumber(h[2]), h[3] + 1}
end

return {0, redis.call('PTTL', KEYS[1]), 0}
