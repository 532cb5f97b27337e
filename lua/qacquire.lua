-- qacquire: phase 1 of a Redlock acquisition on one node: take the lock if
-- it is free (or its lease ran out), marking the hold pending (no token
-- yet), or reenter it if the caller owns it.
-- Redlock waiters do not queue: they poll.
--
-- KEYS[1]  lock hash   P:{N}   (layout in lib.lua)
-- KEYS[2]  counter     P:{N}:t (lib.lua)
-- KEYS[3]  the node's join record P:j: when (server time in ms) the node
--          was first found without one, that is, empty: new, restarted
--          without its data, or flushed
-- ARGV[1]  owner ID
-- ARGV[2]  lease TTL in milliseconds (positive integer)
-- ARGV[3]  level ID: the request ID of this call (as acquire.lua)
-- ARGV[4]  metadata for a fresh ownership ("" for none)
-- ARGV[5]  the deepest hold a reentry may make (a positive integer)
-- ARGV[6]  the rejoin delay in ms: how long after it was found empty the
--          node takes part in no majority (the longest lease any client
--          may hold, and the clocks' drift)
-- ARGV[7]  optional: a proposed token (decimal, below 2^53), sent by a
--          client whose owner cannot hold the lock anywhere yet (a first
--          attempt of a new owner); absent or "" for none
--
-- Returns {1, token, depth} when the caller's ownership holds the lock here
-- with its token raised (qraise.lua): a reentry (one more level) or a
-- repeated call (the depth its level was granted at); the lease is raised
-- to end ARGV[2] from now if it ended sooner.
-- Returns {3, counter, depth, time} when the caller holds the lock here
-- pending: a fresh take (depth 1, the p mark set, t left as it was) or a
-- reentry or repeat on a hold still pending; counter is the node's counter
-- (0 if none), time the node's clock (TIME) in microseconds. The client
-- picks the token from a majority's counters and clocks, and raises it.
-- Returns {5, token, 1, time} when the lock was free here, a token was proposed,
-- and it is above the node's counter and at most 5 ms (5000 µs) from its
-- clock (TIME, µs), either way:
-- the caller holds the lock here with that token, and the counter is the
-- token, as if phase 2 had raised it (one round trip instead of two); time
-- is the node's clock, as in {3, ...}, which the client's next proposals
-- follow. A
-- proposal at or below the counter, or outside that span of the clock,
-- leaves the take
-- pending ({3, ...} as without one): the client then picks the token as
-- without a proposal, and raises the nodes that took the proposal too
-- (qraise.lua with the proposal as ARGV[4]).
-- Returns {2, token, depth} when a new level would pass ARGV[5]; nothing is
-- written. Returns {0, pttl, 0} when another owner holds it.
-- Returns {4, wait, 0} when the node is joining: it had no join record
-- (one is written now) or got it less than ARGV[6] ago, so it may have
-- forgotten leases it granted and votes for nobody until they have
-- expired; wait is what is left of the delay in ms. Nothing else is read
-- or written then.
-- Error "FOREIGN <key>" as the other scripts; nothing is written then.
if not canonical(ARGV[6]) then
  return redis.error_reply('ERR malformed rejoin delay')
end
local delay = tonumber(ARGV[6])
local proposal = ARGV[7] or ''
if proposal ~= '' and not canonical(proposal) then
  return redis.error_reply('ERR malformed proposed token')
end
local level = 'l:' .. ARGV[3]
local h, err, _, us, now = begin(KEYS[1], '0', level, KEYS[2])
if not h then
  return err
end
-- The join record, with begin's clock (one TIME per call); nothing is
-- written before it is checked.
local joined, jerr = callOn('GET', KEYS[3])
if joined == nil then
  return jerr
elseif joined == false then
  redis.call('SET', KEYS[3], dec(now))
  return {4, delay, 0}
elseif not canonical(joined) then
  local _, ferr = foreign(KEYS[3])
  return ferr
elseif tonumber(joined) + delay > now then
  return {4, tonumber(joined) + delay - now, 0}
end
local kind = 1
if h.p then
  kind = 3
end
if h.held and h.o == ARGV[1] then
  if not h.granted and h.depth >= tonumber(ARGV[5]) then
    return {2, h.t, h.depth}
  end
  local tok = h.t
  if kind == 3 then
    local c, cerr = counterOf(h)
    if not c then
      return cerr
    end
    tok = c
  end
  local depth = h.granted or h.depth + 1
  h.x = math.max(h.x, now + tonumber(ARGV[2]))
  redis.call('HSET', KEYS[1], level, dec(depth), 'x', dec(h.x))
  keep(KEYS[1], h, 0, now)
  if kind == 3 then
    return {kind, tok, depth, us}
  end
  return {kind, tok, depth}
end
if h.held then
  return {0, h.x - now, 0}
end
local c, cerr = counterOf(h)
if not c then
  return cerr
end
settle(KEYS[1], h)
local p = tonumber(proposal)
-- A proposal may be 5 ms at most from the node's clock, either way: a
-- token stays within that of the clocks of the majority that took it,
-- which the clock floor's argument needs (docs/safety.md, "Redlock").
local taken = p and p > c and p >= us - 5000 and p <= us + 5000 and p < 9007199254740992
local fields = {'o', ARGV[1], 'x', dec(now + tonumber(ARGV[2])), level, '1'}
if not taken then
  fields[#fields + 1], fields[#fields + 2] = 'p', '1'
end
if ARGV[4] ~= '' then
  fields[#fields + 1], fields[#fields + 2] = 'm', ARGV[4]
end
if h.compact then
  -- The hash a compacted record stands for comes back with its b, and its
  -- t unless the proposal replaces it.
  fields[#fields + 1], fields[#fields + 2] = 'b', dec(h.b)
  if not taken then
    fields[#fields + 1], fields[#fields + 2] = 't', h.ts
  end
end
if taken then
  -- The proposal is the token: t and the counter become it, as qraise.lua
  -- would; a hash without a t starts an incarnation with it (lib.lua's b).
  fields[#fields + 1], fields[#fields + 2] = 't', proposal
  if not h.compact and not h.ts then
    fields[#fields + 1], fields[#fields + 2] = 'b', proposal
  end
  redis.call('SET', KEYS[2], proposal)
end
redis.call('HSET', KEYS[1], unpack(fields))
keep(KEYS[1], h, 0, now)
if taken then
  return {5, p, 1, us}
end
return {3, c, 1, us}
