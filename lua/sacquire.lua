-- sacquire: take a read or write lease of a read-write lock, or a permit of
-- a semaphore (keys: shared.lua), if the caller may now and nobody waits
-- ahead of it; reenter the caller's own hold; or (waiting) join the queue.
--
-- KEYS[1]  the caller's hold: the writer's (w), or K.index:<owner> (r, s)
-- KEYS[2]  the queue P:{N}:q
-- KEYS[3]  the counter P:{N}:t (strict) or the floor P:{S}:f (time tokens)
-- KEYS[4]  the other mode's key
-- KEYS[5]  the holders: the readers' set (RW) or the permits' hash
-- KEYS[6]  RW: the writer's hold; KEYS[7] RW: the epoch (a semaphore sends
--          KEYS[5] for both)
-- ARGV[1..4] owner ID, lease ms, level ID, token mode (as acquire.lua's)
-- ARGV[5]  the caller's queue member when it waits ("" when not), its
--          metadata the kind (shared.lua)
-- ARGV[6]  when waiting: the queue's expiry in ms
-- ARGV[7]  the kind: "r", "w" or "s"
-- ARGV[8]  a semaphore's number of permits
-- ARGV[9]  the deepest hold a reentry may make
-- ARGV[10] "1" when an earlier attempt may have queued the call
--
-- Returns {1, token, depth, slot} when the caller holds it now: fresh
-- (depth 1), a reentry of its own hold, a repeat, or the claim of a hold
-- handed to it; slot is a permit's (-1 for RW). {2, token, depth}: a
-- reentry past ARGV[9], refused. {0, pttl, 0}: refused, pttl the writer's
-- lease left (-1 when a waiting caller queued, or no writer holds it).
-- A writer's owner may take a read lease at once (a downgrade); a reader's
-- owner asking for the write lease is refused ("UPGRADE"), as is a count
-- of permits other than the live semaphore's ("PERMITS <count>").
-- Errors: FOREIGN, MODE, OVERFLOW (lib.lua), "ERR malformed ..."; nothing
-- is written then.
local owner, ttl, level, kind, member = ARGV[1], ARGV[2], 'l:' .. ARGV[3], ARGV[7], ARGV[5]
local M, err = modeOf(ARGV[4])
if not M then
  return err
elseif not lease(ttl) then
  return redis.error_reply('ERR malformed lease')
elseif member ~= '' and not parseWaiter(member) then
  return redis.error_reply('ERR malformed queue member')
elseif redis.call('EXISTS', KEYS[4]) == 1 then
  return redis.error_reply('MODE ' .. KEYS[4])
end
local K = {queue = KEYS[2], counter = KEYS[3], index = KEYS[5], writer = KEYS[6], epoch = KEYS[7]}
local o, ts, depth, granted, m, q = holdOf(KEYS[1], level)
if o == nil then
  return ts
elseif o == owner then
  local r = reenter(KEYS[1], K.queue, level, ttl, member, ARGV[10] == '1', tonumber(ARGV[9]) or 1024, ts, depth, granted, q)
  if type(r) == 'table' and r[1] == 1 then
    if kind ~= 'w' then
      reach(K.index, ttl)
    end
    r[4] = tonumber(m) or -1
  end
  return r
elseif o and kind ~= 'w' then
  return refuse(KEYS[1])
end
local st, serr = sharedOf(K, kind)
if not st then
  return serr
elseif kind == 'w' and st.hs[owner] then
  return redis.error_reply('UPGRADE')
elseif kind == 's' then
  local want = tonumber(ARGV[8])
  if st.count and st.count ~= want then
    return redis.error_reply('PERMITS ' .. st.count)
  end
  st.count = want
end
local queued = redis.call('EXISTS', K.queue) == 1
if kind == 'r' and st.writer == owner or not queued and admits(st, kind) then
  local t, slot = admit(M, K, st, kind, owner, level, ttl)
  if not t then
    return slot
  end
  return {1, t, 1, slot or -1}
end
if member ~= '' then
  local ok, qerr = enqueue(K.queue, clock(), member, ARGV[6])
  if not ok then
    return qerr
  end
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
