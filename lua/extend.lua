-- extend: keep the caller's ownership for at least a new lease.
--
-- KEYS[1]  the hold  P:{N}  (lib.lua)
-- KEYS[2]  the forced-unlock record P:{N}:u
-- ARGV[1]  owner ID
-- ARGV[2]  the ownership's token
-- ARGV[3]  lease in ms, from now (canonical decimal)
--
-- Returns 1 when the ownership (owner and token) holds the lock: its lease
-- ends ARGV[3] from now, or later if it did already (never shortened, so
-- one level or a renewal cannot cut what another relies on). {0, by, ms}
-- when a forced unlock ended the ownership and its record lives; 0 when it
-- does not hold the lock otherwise. Repeating the call is harmless.
-- Errors: FOREIGN (lib.lua), "ERR malformed lease".
if not lease(ARGV[3]) then
  return redis.error_reply('ERR malformed lease')
end
local o, ts = holdOf(KEYS[1], nil, true)
if o == nil then
  return ts
elseif o == ARGV[1] and ts == ARGV[2] then
  stretch(KEYS[1], ARGV[3])
  return 1
end
local f, ferr = forcedOf(KEYS[2])
if f == nil then
  return ferr
elseif f and f.token == ARGV[2] then
  return {0, f.by, f.at}
end
return 0
