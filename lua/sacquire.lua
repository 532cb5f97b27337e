-- sacquire: take a read or write lease of a read-write lock, or a permit of
-- a semaphore (keys: shared.lua), if the caller may now and nobody waits
-- ahead of it; reenter the caller's own hold; or (waiting) join the queue.
--
-- KEYS[1]  the base key: R:{N} (RW) or S:{N} (semaphore)
-- KEYS[2]  the counter P:{N}:t (strict) or the floor P:{S}:f (time tokens)
-- KEYS[3]  the other mode's key
-- ARGV[1..4] owner ID, lease ms, level ID, token mode (as acquire.lua's)
-- ARGV[5]  the kind: "r", "w", or "s<permits>"
-- ARGV[6]  optional: the caller's queue member when it waits, its
--          metadata the kind (shared.lua)
-- ARGV[7]  when waiting: the queue's expiry in ms
-- ARGV[8]  optional: the deepest hold a reentry may make (default 1024)
-- ARGV[9]  optional: "1" when an earlier attempt may have queued the call
--
-- Returns {1, token, depth, slot} when the caller holds it now: fresh
-- (depth 1), a reentry of its own hold, a repeat, or the claim of a hold
-- handed to it; slot is a permit's (-1 for RW). {2, token, depth}: a
-- reentry past ARGV[8], refused. {0, pttl, 0}: refused, pttl the writer's
-- lease left (-1 when a waiting caller queued, or no writer holds it).
-- A writer's owner may take a read lease at once (a downgrade); a reader's
-- owner asking for the write lease is refused ("UPGRADE"), as is a count
-- of permits other than the live semaphore's ("PERMITS <count>"), a
-- holder's reentry included.
-- Errors: FOREIGN, MODE, OVERFLOW (lib.lua), "ERR malformed ..."; nothing
-- is written then.
local owner, ttl, level, member = ARGV[1], ARGV[2], 'l:' .. ARGV[3], ARGV[6] or ''
local kind = string.sub(ARGV[5], 1, 1)
local M, err = modes[ARGV[4]], nil
if not M then
  M, err = modeOf(ARGV[4])
end
if not M then
  return err
elseif not leases[ttl] and not lease(ttl) then
  return redis.error_reply('ERR malformed lease')
end
local K = sharedKeys(KEYS[1], kind, owner)
K.counter = KEYS[2]
-- The own hold, the queue, the other mode's key and what rules the caller
-- out (the writer; a writer: the readers) all absent: the caller takes it.
local n = redis.call('EXISTS', K.hold, K.queue, KEYS[3], kind == 'r' and K.writer or kind == 'w' and K.index or KEYS[3])
if n == 0 and kind ~= 's' then
  local t, terr = admit(M, K, {hs = {}, n = 0, used = {}, writer = false}, kind, owner, level, ttl, false)
  if not t then
    return terr
  end
  return {1, t, 1, -1}
elseif member ~= '' and not parseWaiter(member) then
  return redis.error_reply('ERR malformed queue member')
elseif n > 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  return redis.error_reply('MODE ' .. KEYS[3])
end
local o, ts, depth, granted, m, q = false, nil, 0, nil, nil, nil
if n > 0 then
  o, ts, depth, granted, m, q = holdOf(K.hold, level)
end
if o == nil then
  return ts
elseif o == owner then
  if kind == 's' and not granted then
    -- A reentry of a live permit: its count must be the semaphore's, as
    -- anyone else's must (a claim or a repeat of this call's own level
    -- was checked when it was queued or granted).
    local e, eerr = callOn('HGET', K.index, owner)
    local count = e and string.match(e, '^%d+ (%d+)$')
    if e == nil then
      return eerr
    elseif count and count ~= string.sub(ARGV[5], 2) then
      return redis.error_reply('PERMITS ' .. count)
    end
  end
  local r = reenter(K.hold, K.queue, level, ttl, member, ARGV[9] == '1', tonumber(ARGV[8]) or 1024, ts, depth, granted, q)
  if type(r) == 'table' and r[1] == 1 then
    r[4] = tonumber(m) or -1
  end
  return r
elseif o and kind ~= 'w' then
  return refuse(K.hold)
end
local st, serr = sharedOf(K, kind)
if not st then
  return serr
elseif kind == 'w' and st.hs[owner] then
  return redis.error_reply('UPGRADE')
elseif kind == 's' then
  local want = tonumber(string.sub(ARGV[5], 2))
  if st.count and st.count ~= want then
    return redis.error_reply('PERMITS ' .. st.count)
  end
  st.count = want
end
local queued = n > 0 and redis.call('EXISTS', K.queue) == 1
if kind == 'r' and st.writer == owner or not queued and admits(st, kind) then
  if queued and member ~= '' then
    -- A downgrade of a call that waited (it queued before its owner took
    -- the write lease): its entry goes, or a dispatch would grant it again.
    local left, lerr = callOn('ZREM', K.queue, member)
    if not left then
      return lerr
    end
  end
  local t, slot = admit(M, K, st, kind, owner, level, ttl, queued)
  if not t then
    return slot
  end
  return {1, t, 1, slot or -1}
end
if member ~= '' then
  local ok, qerr = enqueue(K.queue, clock(), member, ARGV[7])
  if not ok then
    return qerr
  end
  queuedBehind(K, st)
end
if queued then
  local t, slot = dispatch(M, K, st, member, ttl)
  if t == nil then
    return slot
  elseif t then
    return {1, t, 1, slot or -1}
  end
end
if member == '' and st.writer then
  return {0, redis.call('PTTL', K.writer), 0}
end
return {0, -1, 0}
