-- acquire: take the lock if it is free and nobody queues for it, reenter it
-- if the caller owns it, or (waiting) join the queue.
--
-- KEYS[1]  lock hash   P:{N}     (layout in lib.lua)
-- KEYS[2]  counter     P:{N}:fence, a canonical decimal: the last token
--          issued (no expiry, or ARGV[6]'s in time mode)
-- KEYS[3]  wait queue  P:{N}:q   (layout in lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  lease TTL in milliseconds (positive integer)
-- ARGV[3]  level ID: the request ID of this call, unique per Lock call. A
--          re-run of the same call (go-redis retries after a read timeout,
--          or a waiter polling) finds its level and is answered without
--          applying twice.
-- ARGV[4]  the caller's queue member (lib.lua) when it waits, "" when not
-- ARGV[5]  when waiting: the queue's expiry in ms, renewed by every waiter
--          that polls, so a queue whose waiters all died goes away
-- ARGV[6]  token mode (lib.lua): "0" the strict counter, a fresh token is
--          counter + 1; "<ms>" time tokens, a fresh token is
--          max(counter + 1, server TIME in µs) and the counter expires
--          <ms> after the last token issued
--
-- Returns {1, token, depth} when the caller holds the lock afterwards:
--   free, nobody queued, or the caller first in the queue:
--                   a fresh token (ARGV[6]), depth 1, TTL ARGV[2];
--   reentry:        same token, one more level, the TTL raised to ARGV[2]
--                   if it was lower (never shortened); reentry never queues;
--   repeated call, or the claim of a lock handed to this waiter:
--                   the stored token and the depth that level was granted
--                   at; the TTL raised to ARGV[2] if it was lower.
-- Returns {0, pttl, 0} when the caller does not hold it; pttl is the
-- holder's remaining TTL in ms (-1 if the key has no TTL). A waiting caller
-- is then in the queue (added at the back if it was not there). A free lock
-- with others queued is handed to the oldest of them first: a caller that
-- does not wait never jumps the queue.
-- Error "FOREIGN <key>" when a key holds a value this library did not
-- write; "OVERFLOW <key>" when the next token would reach 2^53, beyond
-- which Lua's doubles are not exact; "ERR malformed ..." for a bad queue
-- member or token mode. Nothing is written in any of these cases.
-- Any other error is the server's own (OOM, READONLY...), passed on.
local mode, merr = modeOf(ARGV[6])
if not mode then
  return merr
end
local level = 'l:' .. ARGV[3]
local h, err = lockOf(KEYS[1], level)
if h == nil then
  return err
end
local member = ARGV[4]
if member ~= '' and not parseWaiter(member) then
  return redis.error_reply('ERR malformed queue member')
end

if h and h[1] == ARGV[1] then
  if h[4] then
    -- Rewriting the level makes this a write even when the expiry is
    -- already long enough, so that a WAIT after it (WithReplicaAck) also
    -- covers the release that handed the lock here.
    redis.call('HSET', KEYS[1], level, h[4])
    keepAtLeast(KEYS[1], ARGV[2])
    return {1, tonumber(h[2]), tonumber(h[4])}
  end
  redis.call('HSET', KEYS[1], level, string.format('%d', h[3] + 1))
  keepAtLeast(KEYS[1], ARGV[2])
  if member ~= '' then
    redis.call('ZREM', KEYS[3], member)
  end
  return {1, tonumber(h[2]), h[3] + 1}
end

if not h then
  -- Free. The oldest waiter goes first; if that is the caller, or nobody
  -- waits, the caller takes it now.
  local w, werr = nextWaiter(KEYS[3], KEYS[2], mode)
  if w == nil then
    return werr
  end
  if w and w[1] ~= member then
    handTo(KEYS[1], KEYS[2], KEYS[3], w, mode)
  else
    local t = w and w[6]
    if w then
      redis.call('ZREM', KEYS[3], member)
    else
      local terr
      t, terr = freshToken(KEYS[2], mode)
      if not t then
        return terr
      end
    end
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', issue(KEYS[2], t, mode), level, '1')
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, t, 1}
  end
end

if member ~= '' then
  redis.call('ZADD', KEYS[3], 'NX', serverMicros(), member)
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
return {0, redis.call('PTTL', KEYS[1]), 0}
