-- lib: the helpers every lock script is built with (internal/scripts puts
-- the ones a script calls before its body).
--
-- The keys of a lock named N under the prefix P, all in the slot of {N}
-- (docs/design.md's table has each key and field):
--   P:{N}    the hold, a hash that lives while the lock is held, its expiry
--            the lease: o the owner, t the token (absent while a Redlock
--            node's hold is pending), l:<id> a level, named by the request
--            ID that took it, valued the depth it was granted at (a retry
--            is recognised), m metadata, q "1" once a waiter queued (on a
--            Redlock node: once a poller was refused)
--   P:{N}:q  the wait queue (queue.lua), while someone waits
--   P:{N}:t  strict tokens: the counter; never expires, never deleted
--   P:{S}:f  time tokens: the floor of N's slot S, the highest token of
--            the slot; it expires a week after its last write
--   P:{N}:u  after a forced unlock: "<token> <ms> <by>", until that lease
--            would have ended
-- A released or expired name leaves nothing but its counter.
-- A script refuses a key it did not write ("FOREIGN <key>") and a name
-- whose keys show the other token mode ("MODE <key>"), having written
-- nothing. The helpers return several values rather than a table where a
-- common path calls them: a table a call makes costs more than a command.

local function canonical(s)
  return type(s) == 'string' and #s <= 16 and string.find(s, '^[1-9][0-9]*$') ~= nil
end

local function dec(n)
  return string.format('%d', n)
end

local function refuse(key)
  return nil, redis.error_reply('FOREIGN ' .. key)
end

-- callOn runs cmd on key: its reply, or nil plus "FOREIGN <key>" when the
-- key holds another type, or the server's own error (OOM, READONLY...).
local function callOn(cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err then
    if string.sub(r.err, 1, 9) == 'WRONGTYPE' then
      return refuse(key)
    end
    return nil, r
  end
  return r
end

-- clock returns the server's time in µs as a decimal, made of TIME's two
-- strings: tonumber and string.format cost more than a command here.
local function clock()
  local t = redis.call('TIME')
  return t[1] .. string.sub('00000' .. t[2], -6)
end

-- modeOf parses a token mode, "0" (strict) or "<idle ms>" (time tokens):
-- {idle, span (µs), px (see issue)}, or nil plus an error reply. In a
-- Functions library, whose upvalues outlive a call, each is parsed once.
local modes, nModes = {}, 0
local function modeOf(arg)
  local m = modes[arg]
  if m then
    return m
  elseif arg ~= '0' and not canonical(arg) then
    return nil, redis.error_reply('ERR malformed token mode')
  end
  local idle = tonumber(arg)
  local span = math.max(math.floor(idle / 16), 1)
  m = {idle = idle, span = span * 1000, px = dec(idle + span)}
  if nModes < 32 then
    modes[arg], nModes = m, nModes + 1
  end
  return m
end

-- lease reports whether ms is a canonical decimal, remembering a few.
local leases, nLeases = {}, 0
local function lease(ms)
  if leases[ms] then
    return true
  elseif not canonical(ms) then
    return false
  elseif nLeases < 64 then
    leases[ms], nLeases = true, nLeases + 1
  end
  return true
end

-- holdOf reads the hold at key: o (false when the lock is free), ts (the
-- token as stored; nil while pending), depth, granted (the value of the
-- field level, or nil), m, q, and the HGETALL reply; or nil plus an error
-- reply for a key this library did not write. A pending hold is foreign
-- unless pending is true. Values are checked where they are used as
-- numbers (tokenOf).
local function holdOf(key, level, pending)
  local r, err = callOn('HGETALL', key)
  if not r then
    return nil, err
  elseif #r == 0 then
    return false
  end
  local o, ts, depth, granted, m, q = nil, nil, 0, nil, nil, nil
  for i = 1, #r, 2 do
    local f = r[i]
    if f == 'o' then
      o = r[i + 1]
    elseif f == 't' then
      ts = r[i + 1]
    elseif f == level then
      depth, granted = depth + 1, r[i + 1]
    elseif f == 'm' then
      m = r[i + 1]
    elseif f == 'q' and r[i + 1] == '1' then
      q = true
    elseif string.byte(f, 1) == 108 and string.byte(f, 2) == 58 then -- "l:"
      depth = depth + 1
    else
      return refuse(key)
    end
  end
  if not o or o == '' or depth == 0 or not (ts or pending) then
    return refuse(key)
  end
  return o, ts, depth, granted, m, q, r
end

-- tokenOf returns v, a token or a depth read from key, as a number; nil
-- plus "FOREIGN <key>" when it is not a canonical decimal below 2^53.
local function tokenOf(key, v)
  if not canonical(v) or #v == 16 and v > '9007199254740991' then
    return refuse(key)
  end
  return tonumber(v)
end

-- levelsOf returns the level IDs in r, a hold's HGETALL reply.
local function levelsOf(r)
  local ids = {}
  for i = 1, #r, 2 do
    if string.byte(r[i], 1) == 108 and string.byte(r[i], 2) == 58 then
      ids[#ids + 1] = string.sub(r[i], 3)
    end
  end
  return ids
end

-- counterOf reads the counter at key: its value (0 when absent or "0", as
-- issue reads it), or nil plus an error reply for a value not this library's.
local function counterOf(key)
  local v, err = callOn('GET', key)
  if v == nil then
    return nil, err
  elseif v == false or v == '0' then
    return 0
  elseif not canonical(v) then -- 2^53 and above: issue says OVERFLOW
    return refuse(key)
  end
  return tonumber(v)
end

-- floors remembers, per floor key, the last token this library wrote
-- there and when to set its expiry again (issue).
local floors, nFloors = {}, 0

-- raise is issue's general case: key's reply v to INCR (strict) or to
-- SET ... GET of the clock us (time), found not to be the token as it is.
local function raise(M, key, v, above, us)
  local t, old
  if type(v) == 'table' then
    if string.find(v.err, '^WRONGTYPE') or string.find(v.err, 'integer') or string.find(v.err, 'overflow') then
      return refuse(key) -- the command wrote nothing
    end
    return nil, v
  elseif M.idle == 0 then
    t, old = v, v - 1
    if v < 1 then
      redis.call('DECR', key)
      return refuse(key)
    end
  elseif v and v ~= '0' and not canonical(v) then
    redis.call('SET', key, v, 'KEEPTTL')
    return refuse(key)
  else
    t, old = tonumber(us), tonumber(v)
  end
  local want = math.max(t, (old or 0) + 1, (tonumber(above) or 0) + 1)
  if want >= 9007199254740992 then
    if M.idle == 0 then
      redis.call('DECR', key)
    elseif old then
      redis.call('SET', key, v, 'KEEPTTL')
    else
      redis.call('DEL', key)
    end
    return nil, redis.error_reply('OVERFLOW ' .. key)
  end
  local ts = dec(want)
  if want ~= t then
    redis.call('SET', key, ts, 'KEEPTTL')
  end
  if M.idle > 0 then
    -- Unknown to this library's memory, or new: the expiry is set now.
    redis.call('PEXPIRE', key, M.px)
    if nFloors >= 4096 then
      floors, nFloors = {}, 0
    end
    if not floors[key] then
      nFloors = nFloors + 1
    end
    floors[key] = {ts, dec(tonumber(us) + M.span)}
  end
  return ts, us
end

-- issue applies the token rule to the counter at key in mode M and records
-- the token: max(counter + 1, above + 1, clock), above being the ending
-- hold's token (a decimal) on a handoff, the clock (us, read when nil) time
-- tokens' only. Strict: INCR of the name's counter. Time: SET of the slot's floor
-- to the clock with GET and KEEPTTL, one command while the clock is ahead;
-- the floor's expiry (M.px, idle + idle/16) is set when it is made and
-- again once the clock has passed idle/16 since, so it outlives its last
-- write by idle while the clock is not behind it. A counter this library
-- did not write is put back as it was, expiry included, and refused.
-- Returns the token (a number, or its decimal) and us; or nil plus FOREIGN,
-- or OVERFLOW at 2^53, beyond which doubles are not exact.
local function issue(M, key, us, above)
  if M.idle == 0 then
    local t = redis.pcall('INCR', key)
    if type(t) == 'number' and t >= 1 and t < 9007199254740992 and not (above and t <= tonumber(above)) then
      return t, us
    end
    return raise(M, key, t, above, us)
  end
  us = us or clock()
  local v, f = redis.pcall('SET', key, us, 'KEEPTTL', 'GET'), floors[key]
  -- A floor this library wrote last (f[1]) below the clock, as canonical
  -- decimals of one length compare as strings; anything else is checked.
  if not (f and v == f[1] and #v == #us and v < us and (not above or #above < #us or #above == #us and above < us)) then
    return raise(M, key, v, above, us)
  end
  f[1] = us
  if us >= f[2] then
    redis.call('PEXPIRE', key, M.px)
    f[2] = dec(tonumber(us) + M.span)
  end
  return us, us
end

-- grant writes a new hold at key (free, or deleted by the caller): owner
-- o, token ts, depth 1 at level (a field name), metadata meta ("" for
-- none), the q flag when q, and a lease of ms (a decimal string).
local function grant(key, o, ts, level, ms, meta, q)
  if meta == '' and not q then
    redis.call('HSET', key, 'o', o, 't', ts, level, '1')
  else
    local f = {'o', o, 't', ts, level, '1'}
    if meta ~= '' then
      f[7], f[8] = 'm', meta
    end
    if q then
      f[#f + 1], f[#f + 2] = 'q', '1'
    end
    redis.call('HSET', key, unpack(f))
  end
  redis.call('PEXPIRE', key, ms)
end

-- stretch makes the lease at key end ms from now unless it ends later
-- already: an extend, a renewal or a reentry never shortens it.
local function stretch(key, ms)
  local r = redis.pcall('PEXPIRE', key, ms, 'GT')
  if type(r) == 'table' and r.err then
    -- A server before 7.0 has no GT.
    if redis.call('PTTL', key) < tonumber(ms) then
      redis.call('PEXPIRE', key, ms)
    end
  end
end

-- forcedOf reads the forced-unlock record at key: {token (string), at
-- (ms), by} or false; nil plus an error reply for a value this library
-- did not write.
local function forcedOf(key)
  local v, err = callOn('GET', key)
  if v == nil then
    return nil, err
  elseif v == false then
    return false
  end
  local tok, at, by = string.match(v, '^([1-9][0-9]*) ([1-9][0-9]*) (.*)$')
  if not canonical(tok) or #at > 16 then
    return refuse(key)
  end
  return {token = tok, at = tonumber(at), by = by}
end

-- strings reads the strings at keys with one MGET: false for an absent
-- key; nil plus "FOREIGN <key>" for another type (MGET reads it as absent).
local function strings(...)
  local vs = redis.call('MGET', ...)
  for i, v in ipairs(vs) do
    local key = select(i, ...)
    if v == false and redis.call('EXISTS', key) == 1 then
      return refuse(key)
    end
  end
  return vs
end

-- joining reads a Redlock node's join record v (qacquire.lua, at key) at
-- server time now (ms): 0 once the node votes; else the ms left of the
-- rejoin delay, the record written when missing (the node was empty); nil
-- plus an error reply for a value this library did not write.
local function joining(key, v, now, delay)
  if v == false then
    redis.call('SET', key, dec(now))
    return delay
  end
  local at, err = tokenOf(key, v)
  if not at then
    return nil, err
  end
  return math.max(at + delay - now, 0)
end

