-- qraise: phase 2 of a Redlock acquisition on one node: give the caller's
-- hold the token the client chose. A node's counter only rises.
--
-- KEYS[1]  the hold     P:{N}    (lib.lua)
-- KEYS[2]  the counter  P:{N}:t
-- ARGV[1]  owner ID
-- ARGV[2]  level ID of the acquisition, or "" for a bump (below)
-- ARGV[3]  the token (below 2^53)
-- ARGV[4]  "held" when the ownership holds the token on other nodes (a
--          reentry whose hold is gone here); the attempt's proposal when
--          qacquire.lua may have taken the lock here with it and the
--          client chose another; else ""
--
-- A bump (ARGV[2] ""), sent by a release to a node the grant never
-- reached: when the lock is free here and the token is above the counter,
-- the counter becomes the token; returns 1, else 0. Otherwise returns 1
-- when the caller holds the lock here at that level and the hold now has
-- the token: it was pending and the token is above the counter (or equal
-- with "held"); or it has it already (a repeat); or the token is above
-- the counter and the hold's is the proposal ARGV[4] or ARGV[4] is "held".
-- The counter becomes the token. Returns 0 otherwise, writing nothing.
-- Errors: FOREIGN (lib.lua), "ERR malformed token".
local ts, from = ARGV[3], ARGV[4]
if not canonical(ts) or tonumber(ts) >= 9007199254740992 then
  return redis.error_reply('ERR malformed token')
end
local tok = tonumber(ts)
local o, hts, _, granted = holdOf(KEYS[1], 'l:' .. ARGV[2], true)
if o == nil then
  return hts
elseif hts and not tokenOf(KEYS[1], hts) then
  return redis.error_reply('FOREIGN ' .. KEYS[1])
end
local c, cerr = counterOf(KEYS[2])
if not c then
  return cerr
end
if ARGV[2] == '' then
  if o or tok <= c then
    return 0
  end
elseif not (o == ARGV[1] and granted) then
  return 0
elseif hts == ts then
  return 1
elseif hts and (tok <= c or not (from == 'held' or hts == from)) then
  return 0
elseif not hts and (tok < c or (tok == c and from ~= 'held')) then
  return 0
else
  redis.call('HSET', KEYS[1], 't', ts)
end
redis.call('SET', KEYS[2], ts)
return 1
