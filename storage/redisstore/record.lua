-- record: helpers get.lua and write.lua start with (scripts.go prepends
-- this file).
--
-- A record is the hash KEYS[1], "<prefix>:{<escaped key>}:rec", with fields
--   h  the highest token ever accepted (set by the first accepted write and
--      never removed, so Delete keeps the fence)
--   t  the token that wrote v      (absent while there is no value)
--   v  the value, any bytes        (absent while there is no value)
-- Tokens are canonical decimal, 1..18446744073709551615, and are compared
-- as strings (shorter is smaller, then bytewise), never as Lua numbers:
-- those are doubles, which cannot tell 2^53 from 2^53+1.

local function canonical(s)
  return type(s) == 'string' and #s <= 20 and string.find(s, '^[1-9][0-9]*$') ~= nil
end

local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

-- foreign is the refusal of a key holding what, something this store did
-- not write: the error reply "FOREIGN <key> holds <what>", as the lock
-- scripts refuse their keys.
local function foreign(key, what)
  return nil, redis.error_reply('FOREIGN ' .. key .. ' holds ' .. what)
end

-- recordOf reads the record at key: a table with its fields h, t and v
-- (false or nil when absent; all absent when the key does not exist), or
-- nil and the FOREIGN error reply when key holds something this store did
-- not write (another type, or a hash whose fields are not a record).
local function recordOf(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then
    return {}
  end
  if kind ~= 'hash' then
    return foreign(key, 'a ' .. kind)
  end
  local f = redis.call('HMGET', key, 'h', 't', 'v')
  local r = {h = f[1], t = f[2], v = f[3]}
  if not canonical(r.h) or (r.t and not canonical(r.t)) or ((r.t == false) ~= (r.v == false))
      or (r.t and less(r.h, r.t)) or redis.call('HLEN', key) ~= (r.t and 3 or 1) then
    return foreign(key, 'a hash that is not a redfence record')
  end
  return r
end
