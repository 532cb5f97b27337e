-- lib: helpers every lock script starts with (lua.go prepends this file).
--
-- The lock hash P:{N} holds:
--   owner      the owner ID
--   token      the fencing token of this ownership (canonical decimal)
--   l:<id>     one field per live level of the hold (the first acquisition
--              and each reentry); <id> is the request ID of the Lock call
--              that took the level, the value the depth it was granted at
-- so the depth is HLEN - 2, and each level can be released exactly once,
-- by its ID, however often a request is retried and whatever the owner
-- does in between.
--
-- Scripts refuse any key they did not write: the error reply
-- "FOREIGN <key>" changes nothing.

local function canonical(s)
  return type(s) == 'string' and #s <= 16 and string.find(s, '^[1-9][0-9]*$') ~= nil
end

local function foreign(key)
  return nil, redis.error_reply('FOREIGN ' .. key)
end

-- callOn runs cmd on key and returns its reply, or nil plus an error reply:
-- "FOREIGN <key>" when the key holds another type, the server's own error
-- (OOM, READONLY...) unchanged otherwise.
local function callOn(cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    if string.sub(r.err, 1, 9) == 'WRONGTYPE' then
      return foreign(key)
    end
    return nil, r
  end
  return r
end

-- lockOf reads the lock hash in one HGETALL. It returns false when the key
-- does not exist, and {owner, token, depth, granted, levels} when it holds a
-- lock of this library: granted is the value of the field named level (the
-- depth that level was granted at) or nil, levels the live level IDs. It
-- returns nil plus an error reply otherwise (a foreign value, or the
-- server's own error, passed on unchanged so the caller keeps its code).
local function lockOf(key, level)
  local r, err = callOn('HGETALL', key)
  if not r then
    return nil, err
  end
  if #r == 0 then
    return false
  end
  local owner, token, granted, levels = nil, nil, nil, {}
  for i = 1, #r, 2 do
    local f = r[i]
    if f == 'owner' then
      owner = r[i + 1]
    elseif f == 'token' then
      token = r[i + 1]
    elseif string.sub(f, 1, 2) == 'l:' then
      levels[#levels + 1] = string.sub(f, 3)
      if f == level then
        granted = r[i + 1]
      end
    else
      return foreign(key)
    end
  end
  if not owner or not canonical(token) or #levels < 1 then
    return foreign(key)
  end
  return {owner, token, #levels, granted, levels}
end

-- keepAtLeast sets key's expiry to ttl ms from now unless it already
-- expires later (or never): extending never shortens a lease another level
-- relies on.
local function keepAtLeast(key, ttl)
  redis.call('PEXPIRE', key, ttl, 'GT')
end

-- counterOf reads the fencing counter: 0 if absent, its value if it is a
-- canonical decimal, nil plus an error reply otherwise.
local function counterOf(key)
  local c, err = callOn('GET', key)
  if c == nil then
    return nil, err
  end
  if c and not canonical(c) then
    return foreign(key)
  end
  return tonumber(c) or 0
end

-- tombstoneOf reads a release tombstone: false if absent, its value
-- "<token> <owner>" if it is one, nil plus an error reply otherwise.
local function tombstoneOf(key)
  local v, err = callOn('GET', key)
  if v == nil then
    return nil, err
  end
  if v and not string.find(v, '^[1-9][0-9]* ') then
    return foreign(key)
  end
  return v
end

-- serverMicros is the server's clock in microseconds.
local function serverMicros()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Token modes. Every script that can issue a token (acquire, release and
-- abandon, which hand the lock to a waiter) takes the mode as an ARGV:
--   "0"   the strict counter: a fresh token is counter + 1, and the
--         counter never expires (issuing one removes any TTL it had);
--   "<n>" (n > 0) time tokens: a fresh token is max(counter + 1, the
--         server's TIME in microseconds), and the counter expires n ms
--         after the last token issued. A lost counter (expired, evicted,
--         a restart without persistence, a failover that missed writes)
--         then does not restart tokens at 1: they go on from the clock,
--         above every earlier one unless the clock is behind the last.
-- Both modes write the token back to the counter, so clients of either
-- mode may share a name: every token is above the counter they read.
-- modeOf parses the ARGV: the mode (0 or the idle ms), or nil plus an
-- error reply.
local function modeOf(arg)
  if arg == '0' or (type(arg) == 'string' and #arg <= 15 and string.find(arg, '^[1-9][0-9]*$')) then
    return tonumber(arg)
  end
  return nil, redis.error_reply('ERR malformed token mode')
end

-- freshToken reads the counter and returns the token the next ownership
-- gets in mode, writing nothing; nil plus an error reply for a foreign
-- counter, or a token that would reach 2^53, beyond which Lua's doubles
-- are not exact.
local function freshToken(key, mode)
  local c, err = counterOf(key)
  if c == nil then
    return nil, err
  end
  local t = c + 1
  if mode > 0 then
    t = math.max(t, serverMicros())
  end
  if t >= 9007199254740992 then
    return nil, redis.error_reply('OVERFLOW ' .. key)
  end
  return t
end

-- issue writes token t (from freshToken) to the counter, with the mode's
-- expiry, and returns it as a canonical decimal.
local function issue(key, t, mode)
  local ts = string.format('%d', t)
  if mode > 0 then
    redis.call('SET', key, ts, 'PX', mode)
  else
    redis.call('SET', key, ts)
  end
  return ts
end

-- The wait queue P:{N}:q is a sorted set of the Lock calls waiting for the
-- lock, oldest first (the score is the server time they queued at, in
-- microseconds). A member is "<level ID>\n<claim ms>\n<owner>\n<channel>":
-- the level the waiter will hold, how long it has to claim a lock handed to
-- it, its owner, and the channel its client listens on.
local function parseWaiter(m)
  return string.match(m, '^([^\n]+)\n([1-9][0-9]*)\n([^\n]+)\n(.+)$')
end

-- nextWaiter reads the oldest waiter of queue and the token it would get
-- in mode, writing nothing: false when nobody waits, {member, level ID,
-- claim ms, owner, channel, token} otherwise, nil plus an error reply for a
-- foreign queue or counter, or a token at 2^53.
local function nextWaiter(queue, counter, mode)
  local head, err = callOn('ZRANGE', queue, 0, 0)
  if not head then
    return nil, err
  end
  if #head == 0 then
    return false
  end
  local id, claim, owner, channel = parseWaiter(head[1])
  if not id then
    return foreign(queue)
  end
  local t, err = freshToken(counter, mode)
  if not t then
    return nil, err
  end
  return {head[1], id, claim, owner, channel, t}
end

-- handTo gives the free lock (its key must not exist) to waiter w, from
-- nextWaiter with the same mode: the new token, depth 1 at the waiter's
-- level, an expiry of the waiter's claim time, and one message
-- "<level ID> <token>" on the waiter's channel. The waiter claims it by
-- calling acquire with its level ID, which raises the expiry to its TTL. A
-- waiter that never claims (it died, or its message was lost and it did not
-- poll in time) loses the lock when the claim time runs out, and the next
-- acquire or poll of another waiter hands it on.
local function handTo(lock, counter, queue, w, mode)
  redis.call('ZREM', queue, w[1])
  local ts = issue(counter, w[6], mode)
  redis.call('HSET', lock, 'owner', w[4], 'token', ts, 'l:' .. w[2], '1')
  redis.call('PEXPIRE', lock, w[3])
  redis.call('PUBLISH', w[5], w[2] .. ' ' .. ts)
end

-- passOn frees the lock whose last level is going (it deletes the hash) and
-- hands it to the oldest waiter, if any. It checks the queue and the counter
-- before writing anything: true when done, nil plus an error reply (nothing
-- written) otherwise.
local function passOn(lock, counter, queue, mode)
  local w, err = nextWaiter(queue, counter, mode)
  if w == nil then
    return nil, err
  end
  redis.call('DEL', lock)
  if w then
    handTo(lock, counter, queue, w, mode)
  end
  return true
end
