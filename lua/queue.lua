-- queue: the wait queue's helpers, built after lib.lua's.
--
-- P:{N}:q: a sorted set of the calls waiting, oldest first (score: server
-- µs when queued). A member: "<level>\n<claim ms>\n<owner>\n<meta>\n<ch>",
-- the level ID it will hold, the ms it has to claim a lock handed to it, its
-- owner and metadata, and its client's channel after "p" (PUBLISH) or "s"
-- (SPUBLISH, in the lock's slot). A LockMulti entry's ID starts with "*":
-- it is woken, never handed the lock.

local function parseWaiter(m)
  local id, claim, owner, meta, channel = string.match(m, '^([^\n]+)\n([1-9][0-9]*)\n([^\n]+)\n([^\n]*)\n([ps].+)$')
  if id and #claim > 10 then
    return nil
  end
  return id, claim, owner, channel, meta
end

local function isWake(m)
  return string.byte(m, 1) == 42
end

-- notify sends msg on a waiter's channel (kind byte first). A failed
-- SPUBLISH (a node before Redis 7) is ignored: the waiter's poll claims.
local function notify(channel, msg)
  if string.sub(channel, 1, 1) == 's' then
    redis.pcall('SPUBLISH', string.sub(channel, 2), msg)
  else
    redis.call('PUBLISH', string.sub(channel, 2), msg)
  end
end

-- enqueue puts member in queue at score us, unless it is there, and makes
-- the queue live at least ms more (never less: waiters' TTLs differ).
local function enqueue(queue, us, member, ms)
  local added, err = callOn('ZADD', queue, 'NX', us, member)
  if not added then
    return nil, err
  end
  local r = redis.pcall('PEXPIRE', queue, ms, 'GT')
  if type(r) == 'table' or (r == 0 and redis.call('PTTL', queue) == -1) then
    -- No GT (before 7.0), or a queue without an expiry yet.
    redis.call('PEXPIRE', queue, ms)
  end
  return true
end

-- nextWaiter takes the oldest Lock call out of queue, waking the
-- LockMulti entries ahead of it, and issues its token (issue, on ckey):
-- {member, id, claim, owner, channel, meta, token (a string)} and us;
-- false and us when no Lock call waits, with the token of the caller
-- (issue's reply) when self, as the third value; nil plus an error reply,
-- having written nothing: the queue is read first, and entries go only
-- once the token is issued.
local function nextWaiter(M, ckey, queue, us, above, self)
  local wakes, w, from = nil, nil, 0 -- wakes: made only when one is found
  while not w and from >= 0 do
    local page, err = callOn('ZRANGE', queue, from, from + 15)
    if not page then
      return nil, err
    end
    for i = 1, #page do
      local id, claim, owner, channel, meta = parseWaiter(page[i])
      if not id then
        return refuse(queue)
      elseif not isWake(page[i]) then
        w = {member = page[i], id = id, claim = claim, owner = owner, channel = channel, meta = meta}
        break
      end
      wakes = wakes or {}
      wakes[#wakes + 1] = {channel, id .. ' 0'}
    end
    from = #page == 16 and from + 16 or -1 -- -1: the queue ends here
  end
  local t, x = nil, nil
  if w or self then
    t, x = issue(M, ckey, us, above)
    if not t then
      return nil, x
    end
  end
  local n = (wakes and #wakes or 0) + (w and 1 or 0)
  if n > 0 then
    redis.call('ZREMRANGEBYRANK', queue, 0, n - 1)
  end
  for i = 1, wakes and #wakes or 0 do
    notify(wakes[i][1], wakes[i][2])
  end
  if w then
    w.token = type(t) == 'string' and t or dec(t)
    return w, x
  end
  return false, x or us, t
end

-- handTo gives the lock at key to waiter w (nextWaiter's): depth 1 at its
-- level, a lease of its claim time, "<level ID> <token>" on its channel.
-- It claims by acquiring with its level ID; unclaimed, the lease ends.
local function handTo(key, w)
  redis.call('DEL', key)
  grant(key, w.owner, w.token, 'l:' .. w.id, w.claim, w.meta, true)
  notify(w.channel, w.id .. ' ' .. w.token)
end

-- passOn ends the hold at key (token ts, q flag q): the oldest waiter gets
-- the lock, or the key goes. true, or nil plus an error, writing nothing.
local function passOn(M, ckey, key, queue, ts, q)
  if q then
    if ts and not tokenOf(key, ts) then
      return refuse(key)
    end
    local w, err = nextWaiter(M, ckey, queue, nil, ts)
    if w == nil then
      return nil, err
    elseif w then
      handTo(key, w)
      return true
    end
  end
  redis.call('DEL', key)
  return true
end

-- waitedFor reports whether a Lock call's entry is in queue: LockMulti
-- entries alone do not hold a free name back.
local function waitedFor(queue)
  local from = 0
  while true do
    local ws, err = callOn('ZRANGE', queue, from, from + 63)
    if not ws then
      return nil, err
    end
    for _, m in ipairs(ws) do
      if not isWake(m) then
        return true
      end
    end
    if #ws < 64 then
      return false
    end
    from = from + 64
  end
end

-- examine reads name i of a LockMulti (multi.lua), writing nothing: {o, t
-- (a reentry's token), depth, granted, q, held (another owner's lease
-- left), waited (a Lock call queued), fresh (free)}; {2, i, token, depth}
-- past maxDepth; or nil plus an error reply.
local function examine(i, lock, queue, ckey, other, level, owner, maxDepth)
  local o, ts, depth, granted, _, q = holdOf(lock, level)
  if o == nil then
    return nil, ts
  end
  local n = redis.call('EXISTS', queue, other, other)
  if n >= 2 then
    return nil, redis.error_reply('MODE ' .. other)
  end
  local h = {o = o, depth = depth, q = q or n == 1}
  if o == owner then
    local err
    h.t, err = tokenOf(lock, ts)
    if h.t and granted then
      h.granted, err = tokenOf(lock, granted)
    end
    if not h.t or granted and not h.granted then
      return nil, err
    elseif not granted and depth >= maxDepth then
      return {2, i, h.t, depth}
    end
  elseif o then
    h.held = redis.call('PTTL', lock)
  else
    local waited, werr = false, nil
    if h.q then
      waited, werr = waitedFor(queue)
    end
    local c, cerr = true, nil
    if not waited then
      c, cerr = counterOf(ckey) -- checked now, issued once every name is free
    end
    if waited == nil or not c then
      return nil, werr or cerr
    end
    h.waited, h.fresh = waited, not waited
  end
  return h
end

-- reenter is acquire's answer to the owner of the hold at lock (token ts,
-- depth, and granted: its level's value when this call took it, a repeat
-- or a claim). The call's queue entry (member) leaves the queue when it
-- may be there (q: the hold has had waiters; again: an earlier attempt).
local function reenter(lock, queue, level, ttl, member, again, maxDepth, ts, depth, granted, q)
  local t, err = tokenOf(lock, ts)
  if not t then
    return err
  elseif not granted and depth >= maxDepth then
    -- Refused: a waiting call leaves the queue too, or the lock would be
    -- handed to a call that has returned.
    local left, lerr = true, nil
    if member ~= '' then
      left, lerr = callOn('ZREM', queue, member)
    end
    return left and {2, t, depth} or lerr
  elseif not granted and member ~= '' and (q or again) then
    local left, lerr = callOn('ZREM', queue, member)
    if not left then
      return lerr
    end
  end
  if granted then
    depth, err = tokenOf(lock, granted)
    if not depth then
      return err
    end
  else
    depth = depth + 1
  end
  -- A repeat or a claim writes its level again, so that a WAIT after it
  -- (WithReplicaAck) covers the handoff too.
  redis.call('HSET', lock, level, dec(depth))
  stretch(lock, ttl)
  return {1, t, depth}
end

-- contend is acquire's answer when another owner holds the lock (held) or
-- the name is free with a queue: its oldest Lock call goes first (the
-- caller takes it if that is itself or nobody); a waiting caller (member)
-- joins the queue, which lives queueTTL more, and is told -1 for the
-- holder's lease: it is woken, or polls.
local function contend(M, lock, queue, ckey, owner, level, ttl, meta, member, queueTTL, held, q)
  local pttl, us = -1, nil
  if held and member == '' then
    pttl = redis.call('PTTL', lock) -- a waiting call polls, and needs none
  elseif not held then
    local w, x, t = nextWaiter(M, ckey, queue, nil, nil, true)
    if w == nil then
      return x
    elseif not w or w.member == member then
      t = w and w.token or t
      grant(lock, owner, t, level, ttl, meta, true)
      return t
    end
    handTo(lock, w)
    pttl, q, us = tonumber(w.claim), true, x
  end
  if member ~= '' then
    local ok, err = enqueue(queue, us or clock(), member, queueTTL)
    if not ok then
      return err
    elseif not q then
      redis.call('HSET', lock, 'q', '1')
    end
  end
  return {0, pttl, 0}
end

-- refuseMulti is multi.lua's answer when some of its names refuse (hs:
-- examine's, KEYS: multi's): a free name a Lock call waits for goes to it,
-- and the call's entry (member) joins the queue of each name that refused
-- and leaves the others'. {0, pttl, i, j, ...}, or nil plus an error reply.
local function refuseMulti(M, KEYS, hs, member, again, queueTTL, us, pttl)
  local reply = {0, pttl}
  for i, h in ipairs(hs) do
    local lock, queue = KEYS[4 * i - 3], KEYS[4 * i - 2]
    if h.held or h.waited then
      reply[#reply + 1] = i
      local w, err = false, nil
      if h.waited then
        w, err = nextWaiter(M, KEYS[4 * i - 1], queue, us)
      end
      if w == nil then
        return err
      elseif w then
        handTo(lock, w)
        h.o, h.q = true, true
      end
      if member ~= '' then
        local ok, qerr = enqueue(queue, us, member, queueTTL)
        if not ok then
          return qerr
        elseif h.o and not h.q then
          redis.call('HSET', lock, 'q', '1')
        end
      end
    elseif member ~= '' and again then
      redis.pcall('ZREM', queue, member)
    end
  end
  return reply
end

