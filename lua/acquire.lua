-- acquire: take the lock if it is free and nobody queues for it, reenter it
-- if the caller owns it, or (waiting) join the queue.
--
-- KEYS[1]  lock hash   P:{N}     (layout in lib.lua)
-- KEYS[2]  wait queue  P:{N}:q   (layout in queue.lua)
-- KEYS[3]  counter     P:{N}:t in strict mode, else the floor P:{S}:f (lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  lease TTL in milliseconds (positive integer)
-- ARGV[3]  level ID: the request ID of this call, unique per Lock call. A
--          re-run of the same call (go-redis retries after a read timeout,
--          or a waiter polling) finds its level and is answered without
--          applying twice.
-- ARGV[4]  the caller's queue member (queue.lua) when it waits, "" when not
-- ARGV[5]  when waiting: the queue's expiry in ms, renewed by every waiter
--          that polls, so a queue whose waiters all died goes away
-- ARGV[6]  token mode (lib.lua): "0" the strict counter, a fresh token is
--          counter + 1; "<ms>" time tokens, a fresh token is
--          max(counter + 1, server TIME in µs) and the keys expire <ms>
--          after the lease ends
-- ARGV[7]  metadata for a fresh ownership ("" for none): stored in the
--          hash's m field while the ownership lasts; a reentry keeps the
--          ownership's own
-- ARGV[8]  the deepest hold a reentry may make (a positive integer)
-- ARGV[9]  "1" when an earlier attempt of this call may have queued it (any
--          attempt of a waiting Lock after its first); absent (or anything
--          else) for a call's first attempt, which cannot be in the queue:
--          a reentry or a fresh take then needs no ZREM to leave it (see
--          below)
--
-- Returns {1, token, depth} when the caller holds the lock afterwards:
--   free, nobody queued, or the caller first in the queue:
--                   a fresh token (ARGV[6]), depth 1, TTL ARGV[2];
--   reentry:        same token, one more level, the lease raised to end
--                   ARGV[2] from now if it ended sooner (never shortened);
--                   reentry never queues;
--   repeated call, or the claim of a lock handed to this waiter:
--                   the stored token and the depth that level was granted
--                   at; the lease raised as for a reentry.
-- Returns {2, token, depth} when the caller holds the lock at depth
-- ARGV[8] already and asks for a new level: nothing is written but the
-- removal of the caller's queue member, if it had one.
-- Returns {0, pttl, 0} when the caller does not hold it; pttl is what is
-- left of the holder's lease in ms. A waiting caller is then in the queue
-- (added at the back if it was not there). A free lock with others queued
-- is handed to the oldest of them first: a caller that does not wait never
-- jumps the queue.
-- Error "FOREIGN <key>" when a key holds a value this library did not
-- write; "OVERFLOW <key>" when the next token would reach 2^53, beyond
-- which Lua's doubles are not exact; "ERR malformed ..." for a bad queue
-- member or token mode. Nothing is written in any of these cases.
-- Any other error is the server's own (OOM, READONLY...), passed on.
local quick, read = quickTake(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[9])
if quick then
  return quick
end
local member = ARGV[4]
if member ~= '' and not parseWaiter(member) then
  return redis.error_reply('ERR malformed queue member')
end
local level = 'l:' .. ARGV[3]
local h, err, mode, us, now = begin(KEYS[1], ARGV[6], level, KEYS[3], read)
if not h then
  return err
end

if h.held and h.o == ARGV[1] then
  -- A claim or a repeat writes its level again even when the lease is
  -- long enough, so that a WAIT after it (WithReplicaAck) also covers the
  -- release that handed the lock here.
  if not h.granted and h.depth >= tonumber(ARGV[8]) then
    -- Refused; a waiting caller also leaves the queue, or the lock would
    -- later be handed to a call that has already returned.
    if member ~= '' then
      local left, lerr = callOn('ZREM', KEYS[2], member)
      if not left then
        return lerr
      end
    end
    return {2, h.t, h.depth}
  end
  if not h.granted and member ~= '' and (h.q or ARGV[9] == '1') then
    -- With the flag q, or even without it when an earlier attempt of this
    -- call may have queued it: an operator's DEL of the hash drops the
    -- flag and leaves the queue, where this call may still wait. A call's
    -- first attempt cannot be there (one go-redis sent again after it
    -- queued leaves at most a stale entry, which a handoff passes on
    -- within the claim time, as a dead waiter's). First, so that a foreign
    -- queue is refused before anything is written.
    local left, lerr = callOn('ZREM', KEYS[2], member)
    if not left then
      return lerr
    end
  end
  local depth = h.granted or h.depth + 1
  h.x = math.max(h.x, now + tonumber(ARGV[2]))
  redis.call('HSET', KEYS[1], level, dec(depth), 'x', dec(h.x))
  keep(KEYS[1], h, mode, now)
  return {1, h.t, depth}
end

if not h.held then
  -- Free. The oldest waiter goes first; if that is the caller, or nobody
  -- waits, the caller takes it now.
  local w, werr = nextWaiter(KEYS[1], KEYS[2], h, mode, us)
  if w == nil then
    return werr
  end
  -- The token before anything is written: a foreign counter or an
  -- overflow leaves the lock as it was, an expired lease unrecorded.
  local t = w and w.token
  if not w then
    local terr
    t, terr = freshToken(KEYS[1], h, mode, us)
    if not t then
      return terr
    end
  end
  settle(KEYS[1], h)
  if w and w.member ~= member then
    handTo(KEYS[1], KEYS[2], h, w, mode, now)
  else
    if not w and member ~= '' and not h.exists and ARGV[9] == '1' then
      -- The caller leaves the queue (as its head, nextWaiter took it out
      -- already): when the hash was deleted by hand with its flag q, from
      -- wherever an earlier attempt of this call queued it.
      local left, lerr = callOn('ZREM', KEYS[2], member)
      if not left then
        return lerr
      end
    end
    take(KEYS[1], h, ARGV[1], t, level, now + tonumber(ARGV[2]), mode, now, ARGV[7])
    if h.qEmpty then
      redis.call('HDEL', KEYS[1], 'q')
    end
    return {1, t, 1}
  end
end

if member ~= '' then
  local added, aerr = callOn('ZADD', KEYS[2], 'NX', us, member)
  if not added then
    return aerr
  end
  refreshQueue(KEYS[2], ARGV[5])
  if not h.q then
    redis.call('HSET', KEYS[1], 'q', '1')
  end
end
return {0, h.x - now, 0}
