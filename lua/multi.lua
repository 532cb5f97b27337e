-- multi: take several locks for one owner at once, all of them or none
-- (LockMulti, TryLockMulti). Every name is looked at before anything is
-- written: when one refuses, no name is taken, no token issued and no
-- level written.
--
-- KEYS     three per name i (1..n), in the order the client sorted them:
--          KEYS[3i-2] lock hash P:{N}, KEYS[3i-1] wait queue P:{N}:q,
--          KEYS[3i] counter (P:{N}:t in strict mode, else the floor
--          P:{S}:f; lib.lua). On a Cluster every key is in one slot.
-- ARGV[1]  owner ID
-- ARGV[2]  lease TTL in milliseconds (positive integer)
-- ARGV[3]  token mode (lib.lua)
-- ARGV[4]  metadata of each fresh ownership ("" for none)
-- ARGV[5]  the deepest hold a reentry may make (a positive integer)
-- ARGV[6]  the call's queue entry when it waits (queue.lua, its ID
--          starting with "*": isWake), "" when it does not
-- ARGV[7]  when waiting: the queue's expiry in ms (as acquire's ARGV[5])
-- ARGV[8]  "1" when an earlier attempt of the call may have queued it, so
--          its entry leaves every queue it is in once it takes the names
-- ARGV[8+i] the level ID name i is taken at: the request ID of this
--          attempt for that name
--
-- A name is free for the call when the owner holds it (a reentry: same
-- token, one more level, the lease raised to ARGV[2] from now if it ended
-- sooner), or when nobody holds it and no Lock call waits for it (other
-- LockMulti calls' entries do not hold it back: they are woken at each
-- release and try again, as this call does).
-- Returns {1, token1, depth1, token2, depth2, ...} when every name is
-- free for the call: all are taken, fresh tokens above each counter (names
-- that share a floor get rising tokens, so the floor only rises).
-- Returns {0, pttl, i, j, ...} when names i, j, ... (the indices, rising)
-- are not: held by another owner, or waited for by a Lock call. pttl is the
-- least that is left of their holders' leases, in ms (-1 when none is
-- held: the name waits for a Lock call to claim it). Nothing is taken;
-- with ARGV[6], the entry joins the queue of each such name, and a free
-- name that a Lock call waits for is handed to it (as acquire would).
-- Returns {2, i, token, depth} when name i is held by the owner at depth
-- ARGV[5] already: nothing is written.
-- A repeated attempt (go-redis retries) finds its levels and is answered
-- with the depths they were granted at.
-- Error "FOREIGN <key>" when a key holds a value this library did not
-- write; "OVERFLOW <key>" for a token at 2^53; "ERR malformed ..." for
-- bad arguments. Nothing is taken in any of these cases; an error found
-- only while refusing (a foreign queue met by a handoff or by ZADD) may
-- leave the writes of the refusal before it: handoffs made and entries
-- queued, each a state the lock would reach anyway.
local n = #KEYS / 3
local owner, ttl, meta, member = ARGV[1], tonumber(ARGV[2]), ARGV[4], ARGV[6]
local maxDepth = tonumber(ARGV[5])
if n < 1 or n ~= math.floor(n) or #ARGV ~= 8 + n or not ttl or ttl < 1 or not maxDepth then
  return redis.error_reply('ERR malformed multi request')
end
if member ~= '' and not (isWake(member) and parseWaiter(member)) then
  return redis.error_reply('ERR malformed queue member')
end
local mode, rec, idle = modeOf(ARGV[3])
if not mode then
  return rec
end
local us, now = clock()

-- First every name is read, and each fresh token worked out: nothing is
-- written until every name is known to be free for the call.
local hs, toks, blocked, handOn = {}, {}, {}, {}
local pttl = -1
local floors = {} -- counter key -> the highest token this script issues there
for i = 1, n do
  local lock, queue = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local h, err = lockOf(lock, 'l:' .. ARGV[8 + i], now, KEYS[3 * i], nil, true)
  if not h then
    return err
  end
  h.rec, h.idle = rec, idle
  hs[i] = h
  if h.held and h.o == owner then
    if not h.granted and h.depth >= maxDepth then
      return {2, i, h.t, h.depth}
    end
  elseif h.held then
    blocked[#blocked + 1] = i
    local left = h.x - now
    if pttl < 0 or left < pttl then
      pttl = left
    end
  else
    if h.q then
      -- Free, but a Lock call may wait for it: it goes first. Only
      -- LockMulti entries (or none), and the name is the call's. The
      -- queue is read a page at a time, until a Lock call's entry.
      local from, waited = 0, false
      while not waited do
        local ws, werr = callOn('ZRANGE', queue, from, from + 63)
        if not ws then
          return werr
        end
        for _, m in ipairs(ws) do
          if not isWake(m) then
            waited = true
            break
          end
        end
        if #ws < 64 then
          break
        end
        from = from + 64
      end
      if waited then
        blocked[#blocked + 1] = i
        handOn[#handOn + 1] = i
      end
    end
    if blocked[#blocked] ~= i then
      local c, cerr = counterOf(h)
      if not c then
        return cerr
      end
      local carried = floors[h.ckey]
      if carried and carried > h.c then
        h.c = carried
      end
      local t, terr = freshToken(lock, h, mode, us)
      if not t then
        return terr
      end
      toks[i], floors[h.ckey] = t, t
    end
  end
end

if #blocked > 0 then
  for _, i in ipairs(handOn) do
    -- The name's counter is read again: a handoff before may have raised
    -- a floor it shares.
    local h = hs[i]
    hashed(KEYS[3 * i - 2], h)
    h.c = nil
    local w, werr = nextWaiter(KEYS[3 * i - 2], KEYS[3 * i - 1], h, mode, us)
    if w == nil then
      return werr
    end
    settle(KEYS[3 * i - 2], h)
    if w then
      handTo(KEYS[3 * i - 2], KEYS[3 * i - 1], h, w, mode, now)
    elseif h.qEmpty then
      redis.call('HDEL', KEYS[3 * i - 2], 'q')
    end
  end
  if member ~= '' then
    local j = 1
    for i = 1, n do
      local queue = KEYS[3 * i - 1]
      if blocked[j] == i then
        j = j + 1
        local added, aerr = callOn('ZADD', queue, 'NX', us, member)
        if not added then
          return aerr
        end
        refreshQueue(queue, ARGV[7])
        if not hs[i].q and hs[i].exists then
          hashed(KEYS[3 * i - 2], hs[i])
          redis.call('HSET', KEYS[3 * i - 2], 'q', '1')
        end
      elseif ARGV[8] == '1' then
        redis.pcall('ZREM', queue, member)
      end
    end
  end
  local reply = {0, pttl}
  for _, i in ipairs(blocked) do
    reply[#reply + 1] = i
  end
  return reply
end

local reply = {1}
for i = 1, n do
  local lock, h = KEYS[3 * i - 2], hs[i]
  local level = 'l:' .. ARGV[8 + i]
  hashed(lock, h)
  if member ~= '' and ARGV[8] == '1' then
    redis.pcall('ZREM', KEYS[3 * i - 1], member)
  end
  if toks[i] then
    settle(lock, h)
    take(lock, h, owner, toks[i], level, now + ttl, mode, now, meta)
    reply[#reply + 1], reply[#reply + 2] = toks[i], 1
  else
    local depth = h.granted or h.depth + 1
    h.x = math.max(h.x, now + ttl)
    redis.call('HSET', lock, level, dec(depth), 'x', dec(h.x))
    keep(lock, h, mode, now)
    reply[#reply + 1], reply[#reply + 2] = h.t, depth
  end
end
return reply
