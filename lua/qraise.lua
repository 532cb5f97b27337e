-- qraise: phase 2 of a Redlock acquisition on one node: make the caller's
-- pending hold an ownership with the token the client chose. A node only
-- raises its counter, never lowers it.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  level ID of the acquisition (as qacquire.lua)
-- ARGV[3]  the token (decimal, below 2^53)
--
-- Returns 1 when the caller holds the lock here at that level and either
-- it was pending and the token is above t (t becomes the token and the
-- pending mark goes), or t already is the token (a repeated call).
-- Returns 0 otherwise: the hold is gone (expired, taken by another), the
-- level is not there, or the token is not above the counter; nothing is
-- written then. Error "FOREIGN <key>" as the other scripts.
local level = 'l:' .. ARGV[2]
local h, err = begin('0', level)
if not h then
  return err
end
if not canonical(ARGV[3]) then
  return redis.error_reply('ERR malformed token')
end
local tok = tonumber(ARGV[3])
if not (h.held and h.o == ARGV[1] and h.granted) or tok >= 9007199254740992 then
  return 0
end
if not h.p then
  if h.ts == ARGV[3] then
    return 1
  end
  return 0
end
if tok <= h.t then
  return 0
end
redis.call('HSET', KEYS[1], 't', ARGV[3])
redis.call('HDEL', KEYS[1], 'p')
return 1
