-- queue: the wait queue's helpers, which every lock script has after
-- lib.lua's (lua.go prepends both files).
--
-- The wait queue P:{N}:q is a sorted set of the Lock calls waiting for the
-- lock, oldest first (the score is the server time they queued at, in
-- microseconds). A member is
-- "<level ID>\n<claim ms>\n<owner>\n<metadata>\n<kind><channel>": the
-- level the waiter will hold, how long it has to claim a lock handed to it,
-- its owner, the metadata its ownership gets (possibly empty), and the
-- channel its client listens on, after one byte saying how: "p" a classic
-- channel (PUBLISH), "s" a shard channel in the lock's slot (SPUBLISH,
-- Redis 7 Cluster). parseWaiter returns id, claim, owner, channel (kind
-- included) and metadata, or nil.
local function parseWaiter(m)
  local id, claim, owner, meta, channel = string.match(m, '^([^\n]+)\n([1-9][0-9]*)\n([^\n]+)\n([^\n]*)\n([ps].+)$')
  return id, claim, owner, channel, meta
end

-- isWaiter reports whether m is a well-formed member, as parseWaiter
-- would read it: the same pattern without its captures, so that a quick
-- path's check makes no strings.
local function isWaiter(m)
  return string.find(m, '^[^\n]+\n[1-9][0-9]*\n[^\n]+\n[^\n]*\n[ps].') ~= nil
end

-- isWake reports whether m is the entry of a LockMulti call (multi.lua):
-- its level ID starts with "*", which no Lock call's does. Such a waiter
-- is not handed the lock, which would make it hold one name while it
-- waits for others: a release takes it out of the queue and publishes
-- "<its ID> 0" on its channel, and it tries all its names again.
local function isWake(m)
  return string.byte(m, 1) == 42
end

-- refreshQueue makes the queue key live at least ms more, never less: one
-- waiter's shorter TTL must not cut another's place short. PEXPIRE GT
-- (Redis 7) does that in one command; a key without an expiry yet (just
-- created) and a server without GT get a plain PEXPIRE.
local function refreshQueue(queue, ms)
  local r = redis.pcall('PEXPIRE', queue, ms, 'GT')
  if type(r) == 'table' and r.err then
    redis.call('PEXPIRE', queue, ms)
  elseif r == 0 and redis.call('PTTL', queue) == -1 then
    redis.call('PEXPIRE', queue, ms)
  end
end

-- notify sends msg on a waiter's channel (kind included, see parseWaiter).
-- A shard channel shares the lock's slot, so the script may SPUBLISH to it
-- on a Cluster; SPUBLISH reaches the subscribers on the slot's own shard
-- only, where PUBLISH goes to every node. A failed SPUBLISH (a node before
-- Redis 7 in a cluster being upgraded) is ignored rather than failing a
-- script whose writes are made; like a message sent while the waiter's
-- subscription is on another node (a slot moving), it is lost, and the
-- waiter's next poll claims the lock.
local function notify(channel, msg)
  local kind, name = string.sub(channel, 1, 1), string.sub(channel, 2)
  if kind == 's' then
    redis.pcall('SPUBLISH', name, msg)
  else
    redis.call('PUBLISH', name, msg)
  end
end

-- nextWaiter takes the oldest waiter out of queue (ZPOPMIN) and returns it
-- with the token it gets in mode: false when nobody waits, a table {member,
-- id, claim, owner, channel, meta, token} otherwise, nil plus an error
-- reply for a foreign queue, a foreign counter or a token at 2^53, with
-- nothing written (a malformed head is put back, with its score; should it
-- have been the queue's only member, the queue key then lacks its expiry
-- until the next waiter's poll sets it) but the LockMulti entries
-- (isWake) found ahead of it, which are taken out and woken whatever
-- follows: waking one changes no lock. The caller must hand the lock to
-- the waiter returned (handTo) or take it for that waiter itself. The
-- queue is read only when h's flag q says it may hold someone; found
-- empty, h.qEmpty asks the caller's next write to clear the flag (free
-- does).
local function nextWaiter(lock, queue, h, mode, us)
  if not h.q then
    return false
  end
  -- The token first: an error there must leave the queue as it was.
  local t, terr = freshToken(lock, h, mode, us)
  if not t then
    return nil, terr
  end
  local head, err = callOn('ZPOPMIN', queue)
  if not head then
    return nil, err
  end
  -- A LockMulti call's entry (isWake) is never handed the lock: it is
  -- woken to try all its names again, and the next entry is looked at.
  while #head > 0 and isWake(head[1]) do
    local wid, _, _, wchannel = parseWaiter(head[1])
    if wid then
      notify(wchannel, wid .. ' 0')
    end
    head = redis.call('ZPOPMIN', queue)
  end
  if #head == 0 then
    h.qEmpty = true
    return false
  end
  local id, claim, owner, channel, meta = parseWaiter(head[1])
  if not id then
    redis.call('ZADD', queue, head[2], head[1])
    return foreign(queue)
  end
  return {member = head[1], id = id, claim = tonumber(claim), owner = owner, channel = channel, meta = meta, token = t}
end

-- handTo gives the free lock h to waiter w, taken out of the queue by
-- nextWaiter with the same mode: the new token, depth 1 at the waiter's level, a lease of the
-- waiter's claim time, and one message "<level ID> <token>" on the
-- waiter's channel. The waiter claims it by calling acquire with its level
-- ID, which raises the lease to its TTL. A waiter that never claims (it
-- died, or its message was lost and it did not poll in time) loses the lock
-- when the claim time runs out, and the next acquire or poll of another
-- waiter hands it on.
local function handTo(lock, queue, h, w, mode, now)
  local ts = take(lock, h, w.owner, w.token, 'l:' .. w.id, now + w.claim, mode, now, w.meta)
  notify(w.channel, w.id .. ' ' .. ts)
end

-- passOn frees the lock h whose last level is going (with expired, its
-- lease ran out) and hands it to the oldest waiter, if any. It checks the
-- queue before writing anything: true when done, nil plus an error reply
-- (nothing written) otherwise.
local function passOn(lock, queue, h, mode, us, now, expired)
  local w, err = nextWaiter(lock, queue, h, mode, us)
  if w == nil then
    return nil, err
  end
  if not w and not expired and (compact(lock, h, mode) or (mode > 0 and stow(lock, h, now))) then
    return true
  end
  -- A release with time tokens leaves the record with the expiry the
  -- lease gave it (the record time after the lease's end) unless that is
  -- more than twice the record time away: a PEXPIRE saved on the common
  -- path, for a record that lives at most one record time longer.
  local early = not expired and mode > 0 and h.x and h.x - now <= h.rec
  free(lock, h, expired)
  if w then
    handTo(lock, queue, h, w, mode, now)
  elseif not early then
    keep(lock, h, mode, now)
  end
  return true
end
