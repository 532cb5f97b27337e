-- acquire: take the lock if it is free and nobody waits for it, reenter it
-- if the caller owns it, or (waiting) join the queue.
--
-- KEYS[1]  the hold     P:{N}    (lib.lua)
-- KEYS[2]  the queue    P:{N}:q  (queue.lua)
-- KEYS[3]  the counter  P:{N}:t (strict) or the floor P:{S}:f (time tokens)
-- KEYS[4]  the other mode's key: the floor (strict) or P:{N}:t (time)
-- ARGV[1]  owner ID
-- ARGV[2]  lease in ms (canonical decimal)
-- ARGV[3]  level ID: this call's request ID; an attempt that finds its
--          level (a retry, a poll, a claim) is answered as the first
-- ARGV[4]  token mode (lib.lua)
-- ARGV[5]  optional: the caller's queue member when it waits (queue.lua)
-- ARGV[6]  when waiting: the queue's expiry in ms
-- ARGV[7]  optional: metadata of a fresh ownership
-- ARGV[8]  optional: the deepest hold a reentry may make (default 1024)
-- ARGV[9]  optional: "1" when an earlier attempt may have queued the call
-- Optional arguments may be "" or left out (a TryLock sends four).
--
-- Returns the token alone (an integer or a decimal string) for a fresh
-- take: depth 1, the lease ARGV[2]. {1, token, depth} when the caller
-- holds the lock already: a reentry (the same token, one more level), a
-- repeat or the claim of a lock handed to it (the depth its level was
-- granted at), the lease raised to ARGV[2] from now if it ended sooner.
-- {2, token, depth}: a reentry past ARGV[8], refused; nothing written but
-- the removal of the caller's queue entry. {0, pttl, 0}: held by another
-- (pttl: its lease left, ms; -1 for a waiting caller, now in the queue).
-- A free lock with Lock calls queued goes to the oldest: none jumps it.
-- Errors: FOREIGN, MODE, OVERFLOW (lib.lua), "ERR malformed ..."; nothing
-- is written then.
local lock, queue, ckey, owner, level = KEYS[1], KEYS[2], KEYS[3], ARGV[1], 'l:' .. ARGV[3]
local member, meta = ARGV[5] or '', ARGV[7] or ''
local M, err = modes[ARGV[4]], nil
if not M then
  M, err = modeOf(ARGV[4])
end
if not M then
  return err
elseif not leases[ARGV[2]] and not lease(ARGV[2]) then
  return redis.error_reply('ERR malformed lease')
end

-- The other mode's key counts twice: n = hold + queue + 2 x other.
local n = redis.call('EXISTS', lock, queue, KEYS[4], KEYS[4])
if n == 0 then
  -- Free, nobody waits, and the name shows no other token mode: the
  -- reply is the token alone.
  local t, terr = issue(M, ckey)
  if not t then
    return terr
  end
  grant(lock, owner, t, level, ARGV[2], meta, false)
  return t
end

if member ~= '' and (not parseWaiter(member) or isWake(member)) then
  return redis.error_reply('ERR malformed queue member')
end
local o, ts, depth, granted, _, q = holdOf(lock, level)
if o == nil then
  return ts
elseif n - (o and 1 or 0) >= 2 then
  return redis.error_reply('MODE ' .. KEYS[4])
end
if o == owner then
  return reenter(lock, queue, level, ARGV[2], member, ARGV[9] == '1', tonumber(ARGV[8]) or 1024, ts, depth, granted, q)
end
return contend(M, lock, queue, ckey, owner, level, ARGV[2], meta, member, ARGV[6], o, q)
