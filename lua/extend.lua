-- extend: keep the caller's ownership alive for at least a new TTL.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- ARGV[1]  owner ID
-- ARGV[2]  token of the ownership being extended (decimal)
-- ARGV[3]  TTL in milliseconds, counted from now
-- ARGV[4]  token mode (lib.lua), for the hash's own expiry: "0" none,
--          "<ms>" that long after the lease ends
--
-- Returns 1 when the caller's ownership (owner and token) holds the lock;
-- its lease then ends ARGV[3] from now or, if it already ended later, is
-- unchanged: extending never shortens, so one level or the renewal cannot
-- cut the lease another level relies on. Returns 0 when the ownership does
-- not hold the lock (free, expired, another owner, or a later ownership by
-- the same owner), or {0, by, ms} when a forced unlock (force.lua) ended
-- that very ownership and its record is still there: who forced it
-- (WithIdentity's name) and when (server time in ms). Repeating the call
-- is harmless.
-- Error "FOREIGN <key>" when the lock key holds a value this library did
-- not write; "ERR malformed token mode" for a bad ARGV[4].
local quick, read = quickExtend(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
if quick then
  return quick
end
local h, err, mode, _, now = begin(KEYS[1], ARGV[4], nil, nil, read)
if not h then
  return err
end
if not (h.held and h.o == ARGV[1] and h.ts == ARGV[2]) then
  if h.f and h.f.token == ARGV[2] and h.expired[ARGV[2]] == ARGV[1] then
    return {0, h.f.by, h.f.at}
  end
  return 0
end
local x = now + tonumber(ARGV[3])
if x > h.x then
  h.x = x
  redis.call('HSET', KEYS[1], 'x', dec(x))
  keep(KEYS[1], h, mode, now)
end
return 1
