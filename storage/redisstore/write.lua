-- write.lua: a fenced Put or Delete of one resource, checked and applied in
-- one step (a script runs atomically, so no other command interleaves).
-- Starts with record.lua.
--
-- KEYS[1]  the resource's hash, "<prefix>:{<escaped key>}:rec"; its fields
--          h, t and v are in record.lua. The ":rec" after the tag is what
--          no lock key has (a lock's keys end their tag with nothing or
--          ":q"), so a record never shares a key with a lock, whatever the
--          prefixes and names.
-- ARGV[1]  the write's token: canonical decimal, 1..18446744073709551615
-- ARGV[2]  "put" or "del"
-- ARGV[3]  the value, for "put" only
--
-- Returns one of:
--   {1, ARGV[1]}   accepted: h = t = ARGV[1], v = ARGV[3] ("put"), or
--                  h = ARGV[1] and t, v removed ("del")
--   {0, h}         refused, stale: ARGV[1] < h; nothing changed
--   error          "FOREIGN <key> holds <what>": KEYS[1] holds something
--                  this store did not write (another type, or a hash whose
--                  fields are not a record); nothing changed. Or ARGV
--                  malformed (a bug in the caller, never data)
--
-- Re-running the same request is harmless: the token is equal to h, so it
-- is accepted again and writes the same fields.

local tok, op = ARGV[1], ARGV[2]
if not canonical(tok) or (op ~= 'put' and op ~= 'del') then
  return redis.error_reply('ERR redfence write.lua: bad arguments')
end

local r, err = recordOf(KEYS[1])
if not r then
  return err
end
if r.h and less(tok, r.h) then
  return {0, r.h}
end

if op == 'put' then
  redis.call('HSET', KEYS[1], 'h', tok, 't', tok, 'v', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 't', 'v')
  redis.call('HSET', KEYS[1], 'h', tok)
end
return {1, tok}
