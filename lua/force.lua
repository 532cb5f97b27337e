-- force: end an ownership whoever holds it (an operator's forced unlock),
-- hand the lock on as a release would, and record who forced it. The
-- counter is never lowered: the next ownership's token is higher.
--
-- KEYS[1]  the hold     P:{N}    (lib.lua)
-- KEYS[2]  the queue    P:{N}:q  (queue.lua)
-- KEYS[3]  the counter  P:{N}:t (strict) or the floor P:{S}:f (time tokens)
-- KEYS[4]  the forced-unlock record P:{N}:u
-- ARGV[1]  the token of the ownership to end, as the caller read it
--          (inspect.lua): neither a retry nor a new holder is ended
-- ARGV[2]  who forces it: free text without a newline, recorded
-- ARGV[3]  token mode (lib.lua), for the token of a lock handed on
--
-- Returns {1, token} when that ownership held the lock: it ended, the lock
-- went to the oldest waiter or is free, and KEYS[4] records "<token> <ms>
-- <by>" until the forced lease would have ended, for its holder to learn.
-- {2, token}: forced already (a repeat). {0, holder}: that ownership does
-- not hold the lock (holder: the one that does, 0 when free or pending).
-- Errors: FOREIGN, OVERFLOW (lib.lua), "ERR malformed ...".
if not canonical(ARGV[1]) then
  return redis.error_reply('ERR malformed token')
elseif string.find(ARGV[2], '\n', 1, true) then
  return redis.error_reply('ERR malformed forcer')
end
local M, err = modeOf(ARGV[3])
if not M then
  return err
end
local f, ferr = forcedOf(KEYS[4])
if f == nil then
  return ferr
elseif f and f.token == ARGV[1] then
  return {2, tonumber(ARGV[1])}
end
local o, ts, _, _, _, q = holdOf(KEYS[1], nil, true)
if o == nil then
  return ts
elseif not o or ts ~= ARGV[1] then
  local holder, terr = 0, nil
  if o and ts then
    holder, terr = tokenOf(KEYS[1], ts)
  end
  return holder and {0, holder} or terr
end
local left = redis.call('PTTL', KEYS[1])
local ok, perr = passOn(M, KEYS[3], KEYS[1], KEYS[2], ts, q)
if not ok then
  return perr
end
redis.call('SET', KEYS[4], ARGV[1] .. ' ' .. string.sub(clock(), 1, -4) .. ' ' .. ARGV[2], 'PX', dec(math.max(left, 1)))
return {1, tonumber(ARGV[1])}
