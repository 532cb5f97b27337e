-- inspect: an atomic snapshot of one lock, for tools and tests. Read-only.
--
-- KEYS[1]  lock hash   P:{N}     (layout in lib.lua)
-- KEYS[2]  wait queue  P:{N}:q
--
-- Returns {owner, token, pttl, counter, levels, waiters, last, ended, meta}:
--   owner, token  of the holder as stored, false (nil in Go) when free;
--                 token "pending" for a Redlock hold not yet raised;
--   pttl          what is left of the lease in ms, -2 when free;
--   counter       the last token issued, 0 if none was (or the hash was
--                 lost: in time mode it expires when idle);
--   levels        the IDs of the live levels (empty when free);
--   waiters       the number of Lock calls queued;
--   last          the owner of the last ownership (the holder's, when held),
--                 false if none;
--   ended         a flat list token, owner, how: the ownerships known to
--                 have ended, how "released" or "expired": the last one
--                 (when free) and those recorded as expired;
--   meta          the holder's metadata, false when free or none.
-- Error "FOREIGN <key>" when a key holds a value this library did not write.
local _, now = clock()
local h, err = lockOf(KEYS[1], nil, now)
if not h then
  return err
end
local n, nerr = callOn('ZCARD', KEYS[2])
if not n then
  return nerr
end
local ended = {}
for tok, owner in pairs(h.expired) do
  ended[#ended + 1] = tok
  ended[#ended + 1] = owner
  ended[#ended + 1] = 'expired'
end
if h.exists and h.ts and not h.p and not h.held and not h.expired[h.ts] and h.o then
  ended[#ended + 1] = h.ts
  ended[#ended + 1] = h.o
  ended[#ended + 1] = h.x and 'expired' or 'released'
end
if not h.held then
  return {false, false, -2, h.t, {}, n, h.o or false, ended, false}
end
-- A pending Redlock hold (qacquire.lua) has no token yet: reported as "pending".
return {h.o, (not h.p) and h.ts or 'pending', h.x - now, h.t, h.levels, n, h.o, ended, h.m or false}
