-- qraise: phase 2 of a Redlock acquisition on one node: make the caller's
-- pending hold an ownership with the token the client chose. A node only
-- raises its counter, never lowers it.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- KEYS[2]  counter     P:{N}:t (lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  level ID of the acquisition (as qacquire.lua)
-- ARGV[3]  the token (decimal, below 2^53)
-- ARGV[4]  "held" when the same ownership holds the token on other nodes
--          (a reentry whose hold is gone here, while this node's counter
--          may already be the token); the proposed token of the attempt
--          (decimal) when qacquire.lua may have taken the lock here with it
--          and the client chose another; else ""
--
-- With ARGV[2] "" (a bump, sent by a release to a node the holder's grant
-- never reached): when the lock is free here (or its lease ran out, which
-- is settled first) and the token is above the counter, t and the counter become the token, so that
-- this node too remembers it; returns 1 then, 0 otherwise (held, or t
-- already as high). It issues nothing: the token was handed out already.
--
-- Returns 1 when the caller holds the lock here at that level and either
-- it was pending and the token is above the counter, or equal to it with
-- ARGV[4] "held" (t and the counter become the token and the pending mark
-- goes), or t already is the token (a repeated call), or the token is
-- above the counter and t is the proposal ARGV[4] (never handed out) or
-- ARGV[4] is "held" (a hold of the ownership this node has with a lower
-- token: a proposal the client did not choose, whose raise has not landed
-- yet): t and the counter become the token. "held" never lets a token
-- below the counter through: a later ownership exists then.
-- Returns 0 otherwise: the hold is gone (expired, taken by another), the
-- level is not there, or the token is not above the counter; nothing is
-- written then. Error "FOREIGN <key>" as the other scripts.
local level = nil
if ARGV[2] ~= '' then
  level = 'l:' .. ARGV[2]
end
local h, err = begin(KEYS[1], '0', level, KEYS[2])
if not h then
  return err
end
if not canonical(ARGV[3]) then
  return redis.error_reply('ERR malformed token')
end
local tok = tonumber(ARGV[3])
local c, cerr = counterOf(h)
if not c then
  return cerr
end
if ARGV[2] == '' then
  if h.held or tok <= c or tok >= 9007199254740992 then
    return 0
  end
  settle(KEYS[1], h)
  if h.compact then
    redis.call('HSET', KEYS[1], 't', ARGV[3], 'b', dec(h.b))
  else
    redis.call('HSET', KEYS[1], 't', ARGV[3])
  end
  redis.call('SET', KEYS[2], ARGV[3])
  return 1
end
if not (h.held and h.o == ARGV[1] and h.granted) or tok >= 9007199254740992 then
  return 0
end
if not h.p then
  if h.ts == ARGV[3] then
    return 1
  elseif tok <= c or not (ARGV[4] == 'held' or (h.ts == ARGV[4] and canonical(ARGV[4]))) then
    return 0
  end
  redis.call('HSET', KEYS[1], 't', ARGV[3])
  redis.call('SET', KEYS[2], ARGV[3])
  return 1
end
if tok < c or (tok == c and ARGV[4] ~= 'held') then
  return 0
end
if h.ts then
  redis.call('HSET', KEYS[1], 't', ARGV[3])
else
  -- The first token of the hash qacquire.lua created: it starts an
  -- incarnation (lib.lua's b).
  redis.call('HSET', KEYS[1], 't', ARGV[3], 'b', ARGV[3])
end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('HDEL', KEYS[1], 'p')
return 1
