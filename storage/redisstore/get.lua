-- get.lua: read one resource's record and fence. Read-only. Starts with
-- record.lua.
--
-- KEYS[1]  the resource's hash, "<prefix>:{<escaped key>}:rec", with fields
--          h (highest accepted token), t (token that wrote v), v (value);
--          see record.lua, and write.lua for why the ":rec" suffix
-- ARGV[1]  "value" to return the value, "highest" to leave it out
--
-- Returns one of:
--   {1, h, t, v}   the resource has a value (v only when ARGV[1] is "value",
--                  else "")
--   {0, h}         the resource has no value; h is "" if no write was ever
--                  accepted (the key does not exist)
--   error          "FOREIGN <key> holds <what>": KEYS[1] holds something
--                  this store did not write (record.lua); or ARGV
--                  malformed (a bug in the caller, never data)

local mode = ARGV[1]
if mode ~= 'value' and mode ~= 'highest' then
  return redis.error_reply('ERR redfence get.lua: bad arguments')
end

local r, err = recordOf(KEYS[1])
if not r then
  return err
end
if not r.h then
  return {0, ''}
end
if not r.t then
  return {0, r.h}
end
if mode == 'highest' then
  return {1, r.h, r.t, ''}
end
return {1, r.h, r.t, r.v}
