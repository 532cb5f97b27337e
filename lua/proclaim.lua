-- proclaim: an election's writes to its term's metadata (reentrant's
-- Election), where the metadata is "\29<since> <seq> <value>": the byte
-- 0x1d (a control character, which no plain lock's metadata holds), since the
-- server time in ms when the term began, "0" until it is stamped; seq the
-- number of proclaims so far, so that a reader of several nodes tells the
-- newest value (reentrant's agreedMeta).
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- ARGV[1]  "proclaim" or "stamp"
-- ARGV[2]  token of the ownership (decimal)
-- ARGV[3]  proclaim: the owner ID
-- ARGV[4]  proclaim: the new value (no control character)
--
-- proclaim: when the ownership (owner and token) holds the lock, its
-- metadata becomes "\29<since> <seq + 1> <ARGV[4]>", since kept from the
-- metadata it had; returns 1. Returns 0 when the ownership does not hold the lock, or
-- its metadata is not an election's: nothing is written.
-- stamp: when the ownership with token ARGV[2], whoever owns it, holds the
-- lock with a term's metadata whose since is "0", since becomes the server's clock
-- (ms). Returns the metadata (stamped or not; "" for none) while that
-- ownership holds the lock, 0 otherwise. Anyone may stamp: the first
-- stamp, by the campaign that won right after winning or by the first
-- reader before it, is within a round trip of the term's start.
-- Neither touches the lease, the levels or any expiry.
-- Error "FOREIGN <key>" as the other scripts; "ERR bad proclaim mode".
local mode = ARGV[1]
if mode ~= 'proclaim' and mode ~= 'stamp' then
  return redis.error_reply('ERR bad proclaim mode')
end
local _, now = clock()
local h, err = lockOf(KEYS[1], nil, now, nil, nil, true)
if not h then
  return err
end
if not (h.held and h.ts == ARGV[2] and not h.p) then
  return 0
end
local since, seq, value = string.match(h.m or '', '^\29(%d+) (%d+) (.*)$')
if mode == 'stamp' then
  if since == '0' then
    h.m = '\29' .. dec(now) .. ' ' .. seq .. ' ' .. value
    redis.call('HSET', KEYS[1], 'm', h.m)
  end
  return h.m or ''
end
if h.o ~= ARGV[3] or not since then
  return 0
end
redis.call('HSET', KEYS[1], 'm', '\29' .. since .. ' ' .. dec(tonumber(seq) + 1) .. ' ' .. ARGV[4])
return 1
