-- write.lua: a fenced Put or Delete of one resource, checked and applied in
-- one step (a script runs atomically, so no other command interleaves).
--
-- KEYS[1]  the resource's hash, "<prefix>:{<escaped key>}:rec". Its fields:
--            h  the highest token ever accepted (set by the first accepted
--               write and never removed, so Delete keeps the fence)
--            t  the token that wrote v      (absent while there is no value)
--            v  the value, any bytes        (absent while there is no value)
--          The ":rec" after the tag is what no lock key has (a lock's keys
--          end their tag with nothing, ":fence", ":released" or ":rel:..."),
--          so a record never shares a key with a lock, whatever the prefixes
--          and names.
-- ARGV[1]  the write's token: canonical decimal, 1..18446744073709551615
-- ARGV[2]  "put" or "del"
-- ARGV[3]  the value, for "put" only
--
-- Tokens are compared as canonical decimal strings (shorter is smaller, then
-- bytewise), never as Lua numbers: those are doubles, which cannot tell
-- 2^53 from 2^53+1.
--
-- Returns one of:
--   {1, ARGV[1]}   accepted: h = t = ARGV[1], v = ARGV[3] ("put"), or
--                  h = ARGV[1] and t, v removed ("del")
--   {0, h}         refused, stale: ARGV[1] < h; nothing changed
--   {-1, what}     foreign: KEYS[1] holds something this store did not
--                  write (another type, or a hash whose fields are not a
--                  record); what describes it; nothing changed
--   error          ARGV malformed (a bug in the caller, never data)
--
-- Re-running the same request is harmless: the token is equal to h, so it
-- is accepted again and writes the same fields.

local function canonical(s)
  return type(s) == 'string' and #s <= 20 and string.find(s, '^[1-9][0-9]*$') ~= nil
end

local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

local tok, op = ARGV[1], ARGV[2]
if not canonical(tok) or (op ~= 'put' and op ~= 'del') then
  return redis.error_reply('ERR redfence write.lua: bad arguments')
end

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' and kind ~= 'none' then
  return {-1, 'a ' .. kind}
end

local h = false
if kind == 'hash' then
  local f = redis.call('HMGET', KEYS[1], 'h', 't', 'v')
  local t, v = f[2], f[3]
  h = f[1]
  if not canonical(h) or (t and not canonical(t)) or ((t == false) ~= (v == false))
      or (t and less(h, t)) or redis.call('HLEN', KEYS[1]) ~= (t and 3 or 1) then
    return {-1, 'a hash that is not a redfence record'}
  end
end

if h and less(tok, h) then
  return {0, h}
end

if op == 'put' then
  redis.call('HSET', KEYS[1], 'h', tok, 't', tok, 'v', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 't', 'v')
  redis.call('HSET', KEYS[1], 'h', tok)
end
return {1, tok}
