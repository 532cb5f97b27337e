-- inspect: an atomic snapshot of one lock, for tools and tests.
--
-- KEYS[1]  lock hash   P:{N}
-- KEYS[2]  counter     P:{N}:fence
--
-- Returns {owner, count, token, pttl, counter}: strings as stored, false
-- (nil in Go) for absent fields; pttl is an integer (-2 absent, -1 no TTL);
-- counter is the last token ever issued, false if none was.
-- Error "WRONGTYPE <key>" when the lock key holds a foreign value.
local h = redis.pcall('HMGET', KEYS[1], 'owner', 'count', 'token')
if h.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[1])
end
local c = redis.pcall('GET', KEYS[2])
if type(c) == 'table' and c.err then
  return redis.error_reply('WRONGTYPE ' .. KEYS[2])
end
return {h[1], h[2], h[3], redis.call('PTTL', KEYS[1]), c}
