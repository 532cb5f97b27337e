-- lib: helpers every lock script starts with (lua.go prepends this file).
--
-- The lock hash P:{N} holds:
--   owner      the owner ID
--   token      the fencing token of this ownership (canonical decimal)
--   l:<id>     one field per live level of the hold (the first acquisition
--              and each reentry); <id> is the request ID of the Lock call
--              that took the level, the value the depth it was granted at
-- so the depth is HLEN - 2, and each level can be released exactly once,
-- by its ID, however often a request is retried and whatever the owner
-- does in between.
--
-- Scripts refuse any key they did not write: the error reply
-- "FOREIGN <key>" changes nothing.

local function canonical(s)
  return type(s) == 'string' and #s <= 16 and string.find(s, '^[1-9][0-9]*$') ~= nil
end

-- lockOf reads the lock hash. It returns false when the key does not
-- exist, {owner, token, depth} when it holds a lock of this library, and
-- nil plus an error reply otherwise (a foreign value, or the server's own
-- error, passed on unchanged so the caller keeps its code).
local function lockOf(key)
  local h = redis.pcall('HMGET', key, 'owner', 'token')
  if h.err then
    if string.sub(h.err, 1, 9) == 'WRONGTYPE' then
      return nil, redis.error_reply('FOREIGN ' .. key)
    end
    return nil, h
  end
  if not h[1] then
    if h[2] or redis.call('EXISTS', key) == 1 then
      return nil, redis.error_reply('FOREIGN ' .. key)
    end
    return false
  end
  local depth = redis.call('HLEN', key) - 2
  if not canonical(h[2]) or depth < 1 then
    return nil, redis.error_reply('FOREIGN ' .. key)
  end
  return {h[1], h[2], depth}
end

-- keepAtLeast sets key's expiry to ttl ms from now unless it already
-- expires later: extending never shortens a lease another level relies on.
local function keepAtLeast(key, ttl)
  local left = redis.call('PTTL', key)
  if left >= 0 and left < tonumber(ttl) then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- counterOf reads the fencing counter: 0 if absent, its value if it is a
-- canonical decimal, nil plus an error reply otherwise.
local function counterOf(key)
  local c = redis.pcall('GET', key)
  if type(c) == 'table' then
    if c.err and string.sub(c.err, 1, 9) == 'WRONGTYPE' then
      return nil, redis.error_reply('FOREIGN ' .. key)
    end
    return nil, c
  end
  if c and not canonical(c) then
    return nil, redis.error_reply('FOREIGN ' .. key)
  end
  return tonumber(c) or 0
end

-- tombstoneOf reads a release tombstone: false if absent, its value
-- "<token> <owner>" if it is one, nil plus an error reply otherwise.
local function tombstoneOf(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    if v.err and string.sub(v.err, 1, 9) == 'WRONGTYPE' then
      return nil, redis.error_reply('FOREIGN ' .. key)
    end
    return nil, v
  end
  if v and not string.find(v, '^[1-9][0-9]* ') then
    return nil, redis.error_reply('FOREIGN ' .. key)
  end
  return v
end
