-- get.lua: read one resource's record and fence. Read-only.
--
-- KEYS[1]  the resource's hash, "<prefix>:{<escaped key>}:rec", with fields
--          h (highest accepted token), t (token that wrote v), v (value);
--          see write.lua (and there, why the ":rec" suffix)
-- ARGV[1]  "value" to return the value, "highest" to leave it out
--
-- Returns one of:
--   {1, h, t, v}   the resource has a value (v only when ARGV[1] is "value",
--                  else "")
--   {0, h}         the resource has no value; h is "" if no write was ever
--                  accepted (the key does not exist)
--   {-1, what}     foreign: KEYS[1] holds something this store did not
--                  write; what describes it
--   error          ARGV malformed (a bug in the caller, never data)

local function canonical(s)
  return type(s) == 'string' and #s <= 20 and string.find(s, '^[1-9][0-9]*$') ~= nil
end

local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

local mode = ARGV[1]
if mode ~= 'value' and mode ~= 'highest' then
  return redis.error_reply('ERR redfence get.lua: bad arguments')
end

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {0, ''}
end
if kind ~= 'hash' then
  return {-1, 'a ' .. kind}
end

local f = redis.call('HMGET', KEYS[1], 'h', 't', 'v')
local h, t, v = f[1], f[2], f[3]
if not canonical(h) or (t and not canonical(t)) or ((t == false) ~= (v == false))
    or (t and less(h, t)) or redis.call('HLEN', KEYS[1]) ~= (t and 3 or 1) then
  return {-1, 'a hash that is not a redfence record'}
end
if not t then
  return {0, h}
end
if mode == 'highest' then
  return {1, h, t, ''}
end
return {1, h, t, v}
