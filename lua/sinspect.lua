-- sinspect: an atomic snapshot of a read-write lock or a semaphore
-- (shared.lua), for tools and tests. Read-only.
--
-- KEYS[1]  the holders (sacquire.lua's KEYS[5])
-- KEYS[2]  RW: the writer's hold (a semaphore sends KEYS[1])
-- KEYS[3]  the queue
-- KEYS[4]  RW: the epoch (a semaphore sends KEYS[1])
-- KEYS[5]  the counter P:{N}:t; KEYS[6] the floor P:{S}:f
-- ARGV[1]  the kind: "rw" or "s"
--
-- Returns {holders, waiters, epoch, count, counter, floor}: holders a list
-- of {owner, token, pttl, slot (-1 for RW), kind ("w", "r" or "s"),
-- levels}, the writer first; epoch false when none lives (or a
-- semaphore), count the live semaphore's permits (0 when none).
-- Errors: FOREIGN (lib.lua).
local function row(key, k, slot)
  local o, ts, _, _, _, _, r = holdOf(key, nil, true)
  if o == nil then
    return nil, ts
  elseif not o then
    return false
  end
  return {o, ts or 'pending', redis.call('PTTL', key), tonumber(slot) or -1, k, levelsOf(r)}
end
local sem = ARGV[1] == 's'
local ms, err = callOn(sem and 'HGETALL' or 'SMEMBERS', KEYS[1])
if not ms then
  return err
end
local out, count = {}, 0
if not sem then
  local w, werr = row(KEYS[2], 'w')
  if w == nil then
    return werr
  elseif w then
    out[1] = w
  end
end
local step = sem and 2 or 1
for i = 1, #ms, step do
  if sem and ms[i] == '#' then
    count = tonumber(ms[i + 1]) or 0
  else
    local h, herr = row(KEYS[1] .. ':' .. ms[i], sem and 's' or 'r', sem and ms[i + 1])
    if h == nil then
      return herr
    elseif h then
      out[#out + 1] = h
    end
  end
end
local n, nerr = callOn('ZCARD', KEYS[3])
if not n then
  return nerr
end
local c, cerr = counterOf(KEYS[5])
local f, ferr = counterOf(KEYS[6])
if not c or not f then
  return cerr or ferr
end
local e = false
if not sem then
  e = redis.call('GET', KEYS[4])
end
if #out == 0 then
  count = 0
end
return {out, n, e, count, c, f}
