-- force: end an ownership whoever holds it (an operator's forced unlock),
-- hand the lock to the oldest waiter as a release would, and record who
-- forced it. The counter is never lowered: the next ownership gets a
-- higher token, so the forced holder's writes are refused by every fenced
-- store once the next holder has written.
--
-- KEYS[1]  lock hash   P:{N}     (layout in lib.lua)
-- KEYS[2]  wait queue  P:{N}:q   (layout in queue.lua)
-- KEYS[3]  counter     P:{N}:t in strict mode, else the floor P:{S}:f (lib.lua)
-- ARGV[1]  the token of the ownership to end (decimal): the caller read it
--          first (inspect.lua), so a retry, or a holder that changed in
--          between, never ends an ownership the caller did not see
-- ARGV[2]  who forces it: free text, recorded (no newline)
-- ARGV[3]  token mode for the token of a handed-over lock (lib.lua)
--
-- Returns {1, token} when that ownership held the lock: it ended, recorded
-- as forced (e:<T> and f), and the lock went to the oldest waiter (one
-- PUBLISH or SPUBLISH) or is free.
-- Returns {2, token} when that ownership was forced already (a repeat):
-- nothing changes.
-- Returns {0, token} when that ownership does not hold the lock (it ended,
-- its lease ran out, a pending Redlock hold, or another ownership holds
-- it): token is the holder's, 0 when free. Nothing is written but the
-- settling of a lease that ran out.
-- Error "FOREIGN <key>" when a key holds a value this library did not
-- write; "OVERFLOW <key>" when the handed-over lock's token would reach
-- 2^53; "ERR malformed ..." for a bad ARGV. Nothing is written then.
if not canonical(ARGV[1]) then
  return redis.error_reply('ERR malformed token')
end
if string.find(ARGV[2], '\n', 1, true) then
  return redis.error_reply('ERR malformed forcer')
end
local h, err, mode, us, now = begin(KEYS[1], ARGV[3], nil, KEYS[3])
if not h then
  return err
end
if h.f and h.f.token == ARGV[1] then
  return {2, tonumber(ARGV[1])}
end
if not h.held or h.p or h.ts ~= ARGV[1] then
  settle(KEYS[1], h)
  local holder = 0
  if h.held and not h.p then
    holder = h.t
  end
  return {0, holder}
end
local done, perr = passOn(KEYS[1], KEYS[2], h, mode, us, now, true)
if not done then
  return perr
end
redis.call('HSET', KEYS[1], 'f', ARGV[1] .. ' ' .. dec(now) .. ' ' .. ARGV[2])
return {1, tonumber(ARGV[1])}
