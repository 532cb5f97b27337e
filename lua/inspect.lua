-- inspect: an atomic snapshot of one lock, for tools and tests. Read-only.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- KEYS[2]  counter     P:{N}:fence
--
-- Returns {owner, token, pttl, counter, levels}: owner and token as stored,
-- false (nil in Go) when the lock is free; pttl an integer (-2 free, -1 no
-- TTL); counter the last token ever issued, 0 if none was; levels the
-- IDs of the live levels (empty when free).
-- Error "FOREIGN <key>" when a key holds a value this library did not write.
local h, err = lockOf(KEYS[1])
if h == nil then
  return err
end
local c, cerr = counterOf(KEYS[2])
if c == nil then
  return cerr
end
if not h then
  return {false, false, -2, c, {}}
end
local levels = {}
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(f, 1, 2) == 'l:' then
    levels[#levels + 1] = string.sub(f, 3)
  end
end
return {h[1], h[2], redis.call('PTTL', KEYS[1]), c, levels}
