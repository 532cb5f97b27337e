-- inspect: an atomic snapshot of one lock, for tools and tests. Read-only.
--
-- KEYS[1]  lock hash   P:{N}     (layout in lib.lua)
-- KEYS[2]  wait queue  P:{N}:q
-- KEYS[3]  counter     P:{N}:t, the strict counter
-- KEYS[4]  floor       P:{S}:f, the time tokens' floor (lib.lua); optional
-- ARGV[1]  the record time in ms of the caller's time tokens (lib.lua,
--          "Records of released names"); optional: without it, or with
--          a value that is not a canonical decimal, the records of
--          released names are not read
--
-- Returns {owner, token, pttl, counter, levels, waiters, last, ended, meta,
-- forced, floor}:
--   owner, token  of the holder as stored, false (nil in Go) when free;
--                 token "pending" for a Redlock hold not yet raised;
--   pttl          what is left of the lease in ms, -2 when free;
--   counter       the highest token issued for the name, 0 if none was
--                 (or the keys were lost: in time mode they expire);
--   levels        the IDs of the live levels (empty when free);
--   waiters       the number of Lock and LockMulti calls queued;
--   last          the owner of the last ownership (the holder's, when held),
--                 false if none;
--   ended         a flat list token, owner, how: the ownerships known to
--                 have ended, how "released", "expired" or "forced": the
--                 last one (when free) and those recorded in e: fields;
--   meta          the holder's metadata, false when free or none;
--   forced        the last forced unlock {token, ms, by} (lib.lua's f),
--                 false if none;
--   floor         the slot's floor (KEYS[4]), 0 if none or not given: with
--                 time tokens, every fresh token for the name is above it.
-- Error "FOREIGN <key>" when a key holds a value this library did not write.
local _, now = clock()
local h, err = lockOf(KEYS[1], nil, now, KEYS[3], nil, true)
if not h then
  return err
end
local c, cerr = counterOf(h)
if not c then
  return cerr
end
local floor = {c = 0, ckey = KEYS[4]}
if KEYS[4] then
  local ok, ferr = readCounter(floor, false)
  if not ok then
    return ferr
  end
end
if not h.exists and KEYS[4] and canonical(ARGV[1]) then
  -- A stowed incarnation (time tokens): its record, while it lives.
  local r, rerr = recordFor(KEYS[1], KEYS[4], nil, tonumber(ARGV[1]))
  if r == nil then
    return rerr
  end
  if r then
    h.exists, h.t, h.ts, h.o, h.b = true, r.t, r.ts, r.o, r.b
    c = math.max(c, r.t)
  end
end
local n, nerr = callOn('ZCARD', KEYS[2])
if not n then
  return nerr
end
local ended = {}
for tok, owner in pairs(h.expired) do
  ended[#ended + 1] = tok
  ended[#ended + 1] = owner
  ended[#ended + 1] = (h.f and h.f.token == tok) and 'forced' or 'expired'
end
if h.exists and h.ts and not h.p and not h.held and not h.expired[h.ts] and h.o then
  ended[#ended + 1] = h.ts
  ended[#ended + 1] = h.o
  ended[#ended + 1] = h.x and 'expired' or 'released'
end
local forced = false
if h.f then
  forced = {h.f.token, h.f.at, h.f.by}
end
if not h.held then
  return {false, false, -2, c, {}, n, h.o or false, ended, false, forced, floor.c}
end
-- A pending Redlock hold (qacquire.lua) has no token yet: reported as "pending".
return {h.o, (not h.p) and h.ts or 'pending', h.x - now, c, h.levels, n, h.o, ended, h.m or false, forced, floor.c}
