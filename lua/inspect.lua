-- inspect: an atomic snapshot of one lock, for tools and tests. Read-only.
--
-- KEYS[1]  the hold     P:{N}    (lib.lua)
-- KEYS[2]  the queue    P:{N}:q  (queue.lua)
-- KEYS[3]  the strict counter P:{N}:t
-- KEYS[4]  the floor P:{S}:f (time tokens)
-- KEYS[5]  the forced-unlock record P:{N}:u
--
-- Returns {owner, token ("pending" on a Redlock node before phase 2),
-- pttl, counter, levels, waiters, meta, forced {token, ms, by}, floor}:
-- false, false, -2, ..., {} and false for a free lock; 0 for a counter or
-- floor that does not exist.
-- Errors: FOREIGN (lib.lua).
local o, ts, _, _, m, _, r = holdOf(KEYS[1], nil, true)
if o == nil then
  return ts
elseif ts and not tokenOf(KEYS[1], ts) then
  return redis.error_reply('FOREIGN ' .. KEYS[1])
end
local c, cerr = counterOf(KEYS[3])
if not c then
  return cerr
end
local floor, ferr = counterOf(KEYS[4])
if not floor then
  return ferr
end
local n, nerr = callOn('ZCARD', KEYS[2])
if not n then
  return nerr
end
local f, forr = forcedOf(KEYS[5])
if f == nil then
  return forr
elseif f then
  f = {f.token, f.at, f.by}
end
if not o then
  return {false, false, -2, c, {}, n, false, f, floor}
end
return {o, ts or 'pending', redis.call('PTTL', KEYS[1]), c, levelsOf(r), n, m or false, f, floor}
