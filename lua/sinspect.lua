-- sinspect: an atomic snapshot of a read-write lock or a semaphore
-- (shared.lua), for tools and tests. Read-only.
--
-- KEYS[1]  the base key (as sacquire.lua's)
-- KEYS[2]  the counter P:{N}:t; KEYS[3] the floor P:{S}:f
-- ARGV[1]  the kind: "w" (RW) or "s"
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
local K = sharedKeys(KEYS[1], ARGV[1], '')
local ms, err = callOn(sem and 'HGETALL' or 'SMEMBERS', K.index)
if not ms then
  return err
end
local out, count = {}, 0
if not sem then
  local w, werr = row(K.writer, 'w')
  if w == nil then
    return werr
  elseif w then
    out[1] = w
  end
end
local step = sem and 2 or 1
for i = 1, #ms, step do
  local slot, c = nil, nil
  if sem then
    slot, c = string.match(ms[i + 1], '^(%d+) (%d+)$')
    if not slot then
      return redis.error_reply('FOREIGN ' .. K.index)
    end
  end
  local h, herr = row(K.index .. ':' .. ms[i], sem and 's' or 'r', slot)
  if h == nil then
    return herr
  elseif h then
    out[#out + 1] = h
    count = tonumber(c) or 0
  end
end
local n, nerr = callOn('ZCARD', K.queue)
if not n then
  return nerr
end
local c, cerr = counterOf(KEYS[2])
local f, ferr = counterOf(KEYS[3])
if not c or not f then
  return cerr or ferr
end
local e = false
if not sem then
  e = redis.call('GET', K.epoch)
end
if #out == 0 then
  count = 0
end
return {out, n, e, count, c, f}
