-- multi: take several locks for one owner at once, all of them or none
-- (LockMulti, TryLockMulti). Every name is read before anything is
-- written: when one refuses, no name is taken and no token issued.
--
-- KEYS     four per name i (1..n), in the order the client sorted them:
--          the hold, the queue, the counter and the other mode's key, as
--          acquire.lua's KEYS[1..4]. On a Cluster every key is in one slot.
-- ARGV[1]  owner ID
-- ARGV[2]  lease in ms (canonical decimal)
-- ARGV[3]  token mode (lib.lua)
-- ARGV[4]  metadata of each fresh ownership ("" for none)
-- ARGV[5]  the deepest hold a reentry may make ("" for 1024)
-- ARGV[6]  the call's queue entry when it waits (an ID starting with "*")
-- ARGV[7]  when waiting: the queue's expiry in ms
-- ARGV[8]  "1" when an earlier attempt may have queued the call
-- ARGV[8+i] the level ID of name i: the request ID (a retry finds it)
--
-- A name is free for the call when the owner holds it (a reentry) or
-- nobody holds it and no Lock call waits for it (LockMulti entries do not
-- hold it back: they are woken at each release and try again).
-- Returns {1, token1, depth1, ...} when every name is free: all are taken,
-- names that share a counter with rising tokens. {0, pttl, i, j, ...} when
-- names i, j, ... (rising) are not: nothing is taken, pttl is the least of
-- their holders' leases left (-1 when none is held); with ARGV[6] the entry
-- joins each such queue, and a free name a Lock call waits for is handed
-- to it. {2, i, token, depth}: the owner holds name i at ARGV[5] already.
-- Errors: FOREIGN, MODE, OVERFLOW (lib.lua), "ERR malformed ..."; nothing
-- is taken then (a refusal's handoffs may be made).
local n, owner, member = #KEYS / 4, ARGV[1], ARGV[6]
local maxDepth = ARGV[5] == '' and 1024 or tonumber(ARGV[5])
if n < 1 or n ~= math.floor(n) or #ARGV ~= 8 + n or not lease(ARGV[2]) or not maxDepth then
  return redis.error_reply('ERR malformed multi request')
elseif member ~= '' and not (isWake(member) and parseWaiter(member)) then
  return redis.error_reply('ERR malformed queue member')
end
local M, err = modeOf(ARGV[3])
if not M then
  return err
end
local us, hs, blocked, pttl = clock(), {}, {}, -1
for i = 1, n do
  local h, herr = examine(i, KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i], 'l:' .. ARGV[8 + i], owner, maxDepth)
  if not h or h[1] == 2 then
    return h or herr
  elseif h.held or h.waited then
    blocked[#blocked + 1] = i
    pttl = h.held and (pttl < 0 or h.held < pttl) and h.held or pttl
  end
  hs[i] = h
end

if #blocked > 0 then
  return refuseMulti(M, KEYS, hs, member, ARGV[8] == '1', ARGV[7], us, pttl)
end

-- Every token first, so that an overflow takes no name. Names that share
-- a counter get rising tokens: each issue reads the last.
for i = 1, n do
  if hs[i].fresh then
    local t, terr = issue(M, KEYS[4 * i - 1], us)
    if not t then
      return terr
    end
    hs[i].t = t
  end
end
local reply = {1}
for i = 1, n do
  local lock, h, level = KEYS[4 * i - 3], hs[i], 'l:' .. ARGV[8 + i]
  if member ~= '' and ARGV[8] == '1' then
    redis.pcall('ZREM', KEYS[4 * i - 2], member)
  end
  local depth = 1
  if h.fresh then
    grant(lock, owner, h.t, level, ARGV[2], ARGV[4], h.q)
  else
    depth = h.granted or h.depth + 1
    redis.call('HSET', lock, level, dec(depth))
    stretch(lock, ARGV[2])
  end
  reply[#reply + 1], reply[#reply + 2] = h.t, depth
end
return reply
