-- lib: helpers every lock script starts with (lua.go prepends this file).
--
-- A lock name N has these keys, all in one Cluster slot:
--   P:{S}:f  with time tokens (the default), the floor: a string, the
--            highest token issued for any name that shares it (canonical
--            decimal), where {S} is a hash tag of N's slot (a Cluster) or
--            of that slot modulo 512 (one server: the client's choice,
--            internal/scripts/keys.go); its names share it, so it costs
--            nothing per name. It expires
--            <idle> ms after the last token written to it: a clock stepped
--            back by less than that since then repeats no token once the
--            floor is gone. Deleting a lock (DEL P:{N}) does not reset it,
--            and a lost floor restarts at the clock, not at 1.
--   P:{N}:t  in strict mode, the counter: a string, the highest token
--            ever issued for the name (canonical decimal). It is a key of
--            its own so that deleting the lock (DEL P:{N}, what an
--            operator does to a stuck lock) does not reset it: a counter
--            that restarted at 1 would hand out a token a living holder
--            still writes with. No script deletes it, and it never
--            expires. A strict lock released with nothing else to
--            remember is compacted (see compact): its hash goes, and the
--            counter becomes the record "<t> <b> <o>" of the hash it
--            replaced, which scripts read back when they find no hash: one
--            key per released name instead of two.
--            The scripts call the key the client passes (P:{N}:t or the
--            floor) the counter, h.ckey.
--   P:{S}:r<W>:0, P:{S}:r<W>:1  with time tokens, the record hashes
--            beside the floor for a record time of W ms: the records of
--            stowed locks (see "Records of released names" below), named
--            from the floor key the client passes and its record time.
--   P:{N}:q  the wait queue (queue.lua)
--   P:{N}    the lock hash, the state of the current or last ownership:
--   t       the token of the last ownership of this incarnation of the hash
--           (canonical decimal), kept when the lock is freed
--   b       the first token this incarnation of the hash issued: a token
--           below it belongs to an ownership whose hash was deleted (by an
--           operator, an eviction, a time-mode expiry)
--   o       the owner of the last ownership, kept when it ends, so that a
--           post-mortem can say whose it was
--   x       while held: when the lease ends, server time in ms; absent once
--           the lock is free. A lock whose x has passed is free: the next
--           script that writes records that ownership as expired (e:<T>)
--   l:<id>  while held, one field per live level of the hold (the first
--           acquisition and each reentry): <id> is the request ID of the
--           Lock call that took the level, the value the depth it was
--           granted at; so the depth is the number of l: fields
--   e:<T>   an ownership with token T that ended other than by release (its
--           lease ran out, or it was forced: see f); the value is its
--           owner. The 16 with the highest tokens are kept;
--   w       the highest token of an e: field dropped for that, if any: an
--           ownership at or below it may have expired
--   f       the last forced unlock (force.lua): "<T> <ms> <by>", the token
--           of the ownership it ended, server time in ms, and who forced it
--   y       "1" in a hash an earlier version's time-mode client gave an
--           expiry; a strict client that writes removes it and the expiry
--   m       while held, when the ownership was taken with metadata: that
--           metadata (a short caller-chosen string), removed when it ends
--   p       "1" while a Redlock hold is pending (qacquire.lua): the lock is
--           held but t is still the node's last token, not the holder's,
--           until qraise.lua raises it; an expired pending hold is
--           not recorded as an ownership (its t was never its token)
--   q       "1" while the wait queue may hold someone: set by the script
--           that queues a waiter, cleared by the first that finds the queue
--           empty. Without it the queue is not read, so the uncontended path
--           costs no queue command.
--           With time tokens the commonest hold, depth 1 with no metadata
--           and nothing else in its hash (quick.lua's quickTake on a free
--           name), is kept as a string instead, "<t> <x> <b> <id> <o>"
--           (t, x and b canonical, b <= t, <id> the level's ID without a
--           space, <o> the owner, not empty), with the hash's expiry: the
--           same state as the hash o, t, x, l:<id> = 1, b, which one SET
--           writes and one GET reads. A script that writes any other state
--           turns it into that hash first (lockOf); a quick path releases
--           or extends it as it is.
-- In strict mode neither the hash nor the counter expires. In time mode
-- the hash expires <record> ms after its lease ends, or after the release
-- when more of the lease than that was left (passOn), unless a clean
-- release stows it (deletes it, its record kept in a record hash for one
-- to two record times); the floor expires <idle> ms after its last token.
--
-- Retries. A request go-redis retries may run twice. Each level is taken
-- and released by the one request that names its ID, so a repeat finds its
-- level (or finds it gone) and changes nothing. A repeated release of the
-- last level finds its ownership ended, and an ownership ends by release
-- only once all its levels are released, its own included: so a release
-- whose ownership T ended is told it released unless e:<T> says T expired
-- or was forced,
-- T is at or below w (it may have), or T is not of this incarnation of the
-- hash (above t, or below b). No key or field is written per release.
--
-- Scripts refuse any key they did not write: the error reply
-- "FOREIGN <key>" changes nothing.

local function canonical(s)
  return type(s) == 'string' and #s <= 16 and string.find(s, '^[1-9][0-9]*$') ~= nil
end

local function foreign(key)
  return nil, redis.error_reply('FOREIGN ' .. key)
end

-- dec formats an integer-valued number as a canonical decimal.
local function dec(n)
  return string.format('%d', n)
end

-- expiryArg returns ms + rec, with ms a whole number of milliseconds as a
-- decimal string (a lease from the ARGV, a waiter's claim time) and rec a
-- number (the record time), as the decimal string a command is given:
-- redis.call formats a Lua number with "%.17g", which costs more than the
-- command's own parse of the string (0.3 to 0.5 µs a number on this
-- project's machine). A client sends a few such values again and again:
-- they are kept per string (in a Functions library, across calls; at most
-- 64). The keys are strings, never numbers: gopher-lua (miniredis) puts a
-- whole-number key in a table's array part, filling every index below it
-- (a cache keyed by 7 days in ms hung the suite on miniredis).
local expiryArgs, nExpiryArgs = {}, 0
local function expiryArg(ms, rec)
  local c = expiryArgs[ms]
  if c and c[1] == rec then
    return c[2]
  end
  local n = tonumber(ms) + rec
  if n ~= math.floor(n) or n >= 9007199254740992 then
    -- Not a whole number %d can print (a malformed argument): the command
    -- gets the number, and refuses it, as before.
    return n
  end
  local s = dec(n)
  if c then
    c[1], c[2] = rec, s
  elseif nExpiryArgs < 64 then
    expiryArgs[ms], nExpiryArgs = {rec, s}, nExpiryArgs + 1
  end
  return s
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

-- parseForced reads the f field, "<token> <ms> <by>": a table {token
-- (string), at (ms), by}, or nil when malformed.
local function parseForced(v)
  local tok, at, by = string.match(v, '^([1-9][0-9]*) ([1-9][0-9]*) (.*)$')
  if not tok or #tok > 16 or #at > 16 then
    return nil
  end
  return {token = tok, at = tonumber(at), by = by}
end

-- clock returns the server's time in microseconds and in milliseconds.
local function clock()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end

-- parseCounter reads a counter value (a string, or false for no key): the
-- highest token issued and, for a compacted record "<t> <b> <o>", the b
-- and o of the hash it replaced (nil for a plain counter); nil for a
-- foreign value.
local function parseCounter(v)
  if v == false then
    return 0
  elseif canonical(v) then
    return tonumber(v)
  end
  local ts, bs, o = string.match(v, '^([1-9][0-9]*) ([1-9][0-9]*) (.+)$')
  if not ts or not canonical(ts) or not canonical(bs) or tonumber(bs) > tonumber(ts) then
    return nil
  end
  return tonumber(ts), tonumber(bs), o
end

-- readCounter reads h's counter key, h.ckey, into h.c. With absent (the
-- hash does not exist), a compacted record gives h the state of the hash
-- it replaced: exists, compact, t, ts, b and o. true, or nil plus an error
-- reply for a foreign value.
local function readCounter(h, absent)
  local v = redis.pcall('GET', h.ckey)
  if type(v) == 'table' and v.err then
    if string.sub(v.err, 1, 9) == 'WRONGTYPE' then
      return foreign(h.ckey)
    end
    return nil, v
  end
  local c, b, o = parseCounter(v)
  if not c then
    return foreign(h.ckey)
  end
  h.c = c
  if b and absent then
    h.exists, h.compact, h.t, h.ts, h.b, h.o = true, true, c, dec(c), b, o
  end
  return true
end

-- splitHold splits a hold kept as a string (see "Keys") into t, x, b, the
-- level's ID and the owner, all strings; nil when v is not one.
local function splitHold(v)
  local t, x, b, id, o = string.match(v, '^([1-9][0-9]*) ([1-9][0-9]*) ([1-9][0-9]*) ([^ ]+) (.+)$')
  if not t or #t > 16 or #x > 16 or #b > #t or (#b == #t and b > t) then
    return nil
  end
  return t, x, b, id, o
end

-- holdValue is the string a hold is kept as (see "Keys"): token t, lease
-- end x, first token b, level ID id and owner o, all strings.
local function holdValue(t, x, b, id, o)
  return t .. ' ' .. x .. ' ' .. b .. ' ' .. id .. ' ' .. o
end

-- unstring turns the lock key's hold kept as a string into the hash it
-- stands for, r (parseHold), with the same expiry. PTTL is 0 in the key's
-- last millisecond, which the hash must not outlive either.
local function unstring(key, r)
  local ttl = redis.call('PTTL', key)
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(r))
  if ttl >= 0 then
    redis.call('PEXPIRE', key, dec(math.max(ttl, 1)))
  end
end

-- parseHold reads a hold kept as a string: the HGETALL reply of the hash
-- it stands for, o, t, x, l:<id>, b in the order quickTake writes them;
-- nil when v is not such a hold.
local function parseHold(v)
  local t, x, b, id, o = splitHold(v)
  if not t then
    return nil
  end
  return {'o', o, 't', t, 'x', x, 'l:' .. id, '1', 'b', b}
end

-- holdOf reads the lock key: its HGETALL reply and false, or for a hold
-- kept as a string the reply of the hash it stands for (parseHold) and
-- true; nil plus an error reply for any other value ("FOREIGN <key>") or
-- the server's own error. Unless ro (a script that writes nothing), a
-- string hold is first turned into that hash, with the same expiry: the
-- same state, so a script that then refuses or errs has still changed
-- nothing any script reads.
local function holdOf(key, ro)
  local r = redis.pcall('HGETALL', key)
  if not r.err then
    return r, false
  elseif string.sub(r.err, 1, 9) ~= 'WRONGTYPE' then
    return nil, r
  end
  local v = redis.pcall('GET', key)
  r = type(v) == 'string' and parseHold(v)
  if not r then
    return foreign(key)
  end
  if not ro then
    unstring(key, r)
  end
  return r, true
end

-- lockOf reads the lock hash in one HGETALL and returns its state at server
-- time now (ms): a table with
--   exists   whether the hash exists
--   t, ts    the last token of this incarnation as a number (0 if none)
--            and as stored; the counter key is read by freshToken only
--   o, x, b, w, m  the fields (x, b and w as numbers), or nil
--   f        the last forced unlock, {token (string), at (ms), by}, or nil
--   y        whether a time-mode client gave the keys an expiry
--   q        whether the queue may hold someone
--   p        whether a Redlock hold is pending (ts is nil when the hash
--            was created by it and no token was ever raised here)
--   compact  the hash is absent and the counter (ckey, when given) is
--            the record of a compacted one: exists, t, ts, b and o are the
--            record's, and h.c the counter (see compact)
--   held     x is there and has not passed
--   levels   the live level IDs, depth their number
--   granted  the depth the field named level was granted at, or nil
--   expired  the e: fields, token (string) to owner
--   str      when the hold is kept as a string and was read with ro: the
--            reply of the hash it stands for (hashed writes it), else nil
-- or nil plus an error reply for a foreign value (or the server's own
-- error, passed on unchanged so the caller keeps its code). read, when
-- given, is the hash's HGETALL reply, already read by a quick path. A hold
-- kept as a string reads as its hash, and unless ro is true it is turned
-- into that hash (holdOf): a script that writes nothing passes ro.
local function lockOf(key, level, now, ckey, read, ro)
  local r, err, str = read, nil, nil
  if not r then
    r, err = holdOf(key, ro)
    if not r then
      return nil, err
    end
    if err and ro then
      str = r
    end
  end
  local h = {exists = #r > 0, t = 0, levels = {}, expired = {}, ckey = ckey, str = str}
  if not h.exists and ckey then
    local ok, cerr = readCounter(h, true)
    if not ok then
      return nil, cerr
    end
    h.depth, h.held = 0, false
    return h
  end
  for i = 1, #r, 2 do
    local f, v = r[i], r[i + 1]
    if f == 't' and canonical(v) then
      h.t, h.ts = tonumber(v), v
    elseif f == 'o' then
      h.o = v
    elseif f == 'x' and canonical(v) then
      h.x = tonumber(v)
    elseif f == 'b' and (v == '0' or canonical(v)) then
      h.b = tonumber(v)
    elseif f == 'w' and canonical(v) then
      h.w = tonumber(v)
    elseif f == 'q' and v == '1' then
      h.q = true
    elseif f == 'p' and v == '1' then
      h.p = true
    elseif f == 'm' then
      h.m = v
    elseif f == 'y' and v == '1' then
      h.y = true
    elseif f == 'f' and parseForced(v) then
      h.f = parseForced(v)
    else
      -- The one-letter fields are done: only now the two-letter prefix.
      local p = string.sub(f, 1, 2)
      if p == 'l:' and canonical(v) then
        h.levels[#h.levels + 1] = string.sub(f, 3)
        if f == level then
          h.granted = tonumber(v)
        end
      elseif p == 'e:' and canonical(string.sub(f, 3)) then
        h.expired[string.sub(f, 3)] = v
      else
        return foreign(key)
      end
    end
  end
  h.depth = #h.levels
  if h.exists and ((not h.ts and not h.p) or (h.x ~= nil) ~= (h.depth > 0) or (h.x and not h.o) or (h.m and not h.x) or (h.p and not h.x)) then
    return foreign(key)
  end
  h.held = h.x ~= nil and h.x > now
  return h
end

-- hashed turns the hold of h, read as a string by a script that passed ro
-- to lockOf (h.str), into its hash: such a script calls it before it
-- writes to the lock's key.
local function hashed(key, h)
  if h.str then
    unstring(key, h.str)
    h.str = nil
  end
end

-- Token modes. Every script that can issue a token (acquire, release and
-- abandon, which hand the lock to a waiter) and every script that moves the
-- lease (extend) takes the mode as an ARGV:
--   "0"      the strict counter: a fresh token is counter + 1, the
--            counter is the name's own key (P:{N}:t) and neither it nor
--            the hash expires (keys that a time-mode client of an earlier
--            version gave an expiry, marked y, are made persistent again);
--   "<i>/<r>" (i, r > 0) time tokens, the default: a fresh token is
--            max(counter + 1, the server's TIME in microseconds), and the
--            counter the client passes is the floor of the name's hash
--            slot, P:{S}:f (S a tag of that slot), which every name of the
--            slot shares: the highest token issued there, kept i ms after
--            the last token written to it. The lock hash
--            expires r ms after its lease ends (a release leaves that
--            expiry, unless more than r ms of the lease were left: then r
--            ms from the release): a released name leaves its hash, a few
--            fields, for r to 2r ms, and then nothing of its own. Lost
--            keys (expired, evicted, deleted, a restart without
--            persistence, a failover that
--            missed writes) do not restart tokens: they go on from the
--            clock, above every earlier one unless the clock is behind the
--            last;
--   "<i>"    as "<i>/<i>" (the form of earlier versions).
-- Tokens of either mode are above the counter and the hash's t they read,
-- so while a name's hash lives, clients of both modes may share it; see
-- docs/safety.md for what mixing modes risks once it is gone.
-- modeOf parses the ARGV: the mode (0, or the floor's idle ms) and the
-- hash's record time in ms (0 in strict mode), then both as the decimal
-- strings a command is given (expiryArg says why); or nil plus an error
-- reply.
local modes, nModes = {}, 0
local function modeOf(arg)
  if arg == '0' then
    return 0, 0, '0', '0'
  end
  -- A client sends one mode string on every call: in a Functions library,
  -- whose upvalues outlive a call, it is parsed once (a few dozen at most
  -- are kept); a script sent with EVALSHA parses it each time.
  local known = modes[arg]
  if known then
    return known[1], known[2], known[3], known[4]
  end
  if type(arg) == 'string' and #arg <= 31 then
    -- A plain find and two anchored checks: cheaper than a pattern with
    -- captures, on every call of the default mode.
    local slash = string.find(arg, '/', 1, true)
    local i, r = arg, arg
    if slash then
      i, r = string.sub(arg, 1, slash - 1), string.sub(arg, slash + 1)
    end
    if #i <= 15 and #r <= 15 and canonical(i) and canonical(r) then
      local mode, rec = tonumber(i), tonumber(r)
      if nModes < 32 then
        modes[arg], nModes = {mode, rec, i, r}, nModes + 1
      end
      return mode, rec, i, r
    end
  end
  return nil, redis.error_reply('ERR malformed token mode')
end

-- begin starts a script: it parses the token mode in modeArg, reads the
-- server's clock and the lock hash key (with level, a field name or
-- nil, and read, the hash's HGETALL reply if a quick path read it, as
-- lockOf), and notes ckey, the counter key (nil in a script that issues
-- no token) and the mode's record time (h.rec). It returns the hash's
-- state, nil, the mode and the time in µs and ms; or nil plus an error
-- reply.
local function begin(key, modeArg, level, ckey, read)
  local mode, rec, idle = modeOf(modeArg)
  if not mode then
    return nil, rec
  end
  local us, now = clock()
  local h, herr = lockOf(key, level, now, ckey, read)
  if not h then
    return nil, herr
  end
  h.rec, h.idle = rec, idle
  return h, nil, mode, us, now
end

-- counterOf returns the highest token issued for h's name: the counter
-- key's value or, when higher, h.t (a counter deleted by hand, or expired
-- in time mode, before the hash). The key is read once per script; nil
-- plus an error reply for a foreign value.
local function counterOf(h)
  if not h.c then
    local ok, err = readCounter(h, false)
    if not ok then
      return nil, err
    end
  end
  return math.max(h.c, h.t)
end

-- freshToken returns the token the next ownership of h gets in mode at
-- server time us, writing nothing; nil plus an error reply for a foreign
-- counter or a token that would reach 2^53, beyond which Lua's doubles are
-- not exact.
local function freshToken(key, h, mode, us)
  local c, err = counterOf(h)
  if not c then
    return nil, err
  end
  local t = c + 1
  if mode > 0 then
    t = math.max(t, us)
  end
  if t >= 9007199254740992 then
    return nil, redis.error_reply('OVERFLOW ' .. key)
  end
  return t
end

-- keep sets the keys' own expiry after a write, for mode: strict, none;
-- time tokens, the hash's record time (h.rec) after the lease ends (h.x,
-- when held) or from now. The floor got its expiry when written (take).
local function keep(key, h, mode, now)
  if mode == 0 then
    if h.y then
      redis.call('HDEL', key, 'y')
      redis.call('PERSIST', key)
      if h.ckey then
        redis.call('PERSIST', h.ckey)
      end
      h.y = nil
    end
    return
  end
  local lease = 0
  if h.x then
    lease = math.max(h.x - now, 0)
  end
  redis.call('PEXPIRE', key, dec(lease + h.rec))
end

-- setCounter writes token ts to h's counter key: in strict mode for good;
-- with time tokens (the floor) to expire mode ms from now. Every caller
-- issued ts above the counter it read in the same script, so the floor,
-- which names share, only rises.
local function setCounter(h, ts, mode)
  if mode == 0 then
    redis.call('SET', h.ckey, ts)
  else
    redis.call('SET', h.ckey, ts, 'PX', h.idle or dec(mode))
  end
end

-- Records of released names (time tokens). A released name whose hash
-- would keep nothing but t, b and o (stow's conditions) is written as one
-- field of a shared record hash, and its hash deleted: a released name then
-- costs no key of its own. The record hashes sit beside the floor the
-- client passes (P:{S}:f), one pair per record time W (h.rec, ms):
-- P:{S}:r<W>:0 and P:{S}:r<W>:1, in the floor's slot, so a script that is
-- given the floor stays in one slot. Time is cut into generations of W: a
-- record written in generation g goes to r<W>:<g mod 2>, which expires at
-- the end of generation g + 1 (PEXPIREAT (g + 2)·W − 1). A record so lives
-- W to 2W, as a kept hash did, and a record hash holds at most two
-- generations' records, the ones it is then written with, never older
-- ones: r<W>:<g mod 2> of g − 2 has expired when g starts. That needs every
-- writer of a pair to cut time alike: clients with another record time
-- (two services on one prefix) have a pair of their own, and neither reads
-- the other's records (a retried release is then answered "not held", the
-- cautious answer, and Inspect does not name the last owner). The field
-- is the lock key from its first "{" (the name's tag: prefixes hold no
-- brace), the value "<t> <o>" (the last
-- ownership's token and owner, when the incarnation began with it; else
-- "<t>/<b> <o>"), or "-" once a take continued it (marked taken). A take
-- that creates the hash continues the record's incarnation (its b) and
-- marks it: so the incarnation spans every ownership since it began, and
-- a release retried after other owners took and released the lock is
-- answered "released" however many did, as long as the record lives. An
-- ownership whose hash an operator deleted leaves the mark: the next take
-- starts a new incarnation, and that ownership's release is answered "not
-- held".

-- recordBuckets returns the two record hashes beside the floor ckey for
-- record time rec (ms), P:{S}:r<rec>:0 and :1 (see above); nil when ckey
-- is not a floor (strict mode, or a key a test gave) or rec is not a
-- positive number. The names of the floors a library sees are kept (in a
-- Functions library, across calls; at most 1,024 floors, each with the
-- last record time it was asked for): a floor is shared by many names, and
-- its record hashes are named on every take and release.
local recBuckets, nRecBuckets = {}, 0
local function recordBuckets(ckey, rec)
  local c = recBuckets[ckey]
  if c and c[1] == rec then
    return c[2], c[3]
  end
  if type(ckey) ~= 'string' or string.sub(ckey, -2) ~= ':f' or type(rec) ~= 'number' or rec <= 0 then
    return nil
  end
  local base = string.sub(ckey, 1, -2) .. 'r' .. dec(rec) .. ':'
  local r0, r1 = base .. '0', base .. '1'
  if c then
    c[1], c[2], c[3] = rec, r0, r1
  elseif nRecBuckets < 1024 then
    recBuckets[ckey], nRecBuckets = {rec, r0, r1}, nRecBuckets + 1
  end
  return r0, r1
end

-- recordField is the field of key's record: the key from its first "{".
local function recordField(key)
  local i = string.find(key, '{', 1, true)
  if i then
    return string.sub(key, i)
  end
  return key
end

-- parseRecord reads a record value: {t, ts, b, o}, or nil when malformed
-- (or the mark "-").
local function parseRecord(v)
  local ts, bs, o = string.match(v, '^([1-9][0-9]*)/([1-9][0-9]*) (.+)$')
  if not ts then
    ts, o = string.match(v, '^([1-9][0-9]*) (.+)$')
    bs = ts
  end
  if not ts or not canonical(ts) or not canonical(bs) or tonumber(bs) > tonumber(ts) then
    return nil
  end
  return {t = tonumber(ts), ts = ts, b = tonumber(bs), o = o}
end

-- putRecord writes the record of key's ownership ts (incarnation b, a
-- string, owner o) beside the floor ckey at server time now (ms) for a
-- record time of rec ms. The record hash gets its expiry with the first
-- field it holds (PEXPIREAT … NX; before Redis 7.0, which has no NX, PTTL
-- then PEXPIREAT): a field already there was written in this generation,
-- after the hash got it, and the hash r<rec>:<g mod 2> of generation g − 2
-- expired as g began. One edge leaves a record shorter-lived, never a
-- hash without an expiry: Redis checks expiries against the time a script
-- started, so a script that starts before a generation's first ms and
-- reads TIME in it may write into the hash of g − 2 in the microseconds
-- before it expires. A record that expires early makes a retried
-- release answer "not held", the cautious answer, and
-- Inspect forget the last owner. true when written; false, having written
-- nothing, when ckey is not a floor, the record hash is not a hash, or the
-- name has a strict counter (its hash is then kept, as before stowing).
local function putRecord(key, ckey, ts, b, o, now, rec)
  local r0, r1 = recordBuckets(ckey, rec)
  if not r0 then
    return false
  end
  local g = math.floor(now / rec)
  local bucket = g % 2 == 1 and r1 or r0
  if redis.call('EXISTS', key .. ':t') == 1 then
    -- The name has a strict counter (P:{N}:t): a strict client (one of an
    -- earlier version in a rolling upgrade) may take it next, and it reads
    -- the hash's t, not the records, to go on above the time tokens.
    return false
  end
  local v = ts .. ' ' .. o
  if b ~= ts then
    v = ts .. '/' .. b .. ' ' .. o
  end
  local n = redis.pcall('HSET', bucket, recordField(key), v)
  if type(n) ~= 'number' then
    return false
  end
  if n == 1 then
    local at = (g + 2) * rec - 1
    local set = redis.pcall('PEXPIREAT', bucket, at, 'NX')
    if type(set) == 'table' and set.err then
      -- A server before 7.0 has no NX: the same in two commands.
      if redis.call('PTTL', bucket) == -1 then
        redis.call('PEXPIREAT', bucket, at)
      end
    end
  end
  return true
end

-- recordFor reads the records of key's name beside the floor ckey: with
-- t, the one whose incarnation holds token t (b <= t <= its t), {t, ts, b,
-- o}; with t nil, the latest; false when there is none; nil plus "FOREIGN
-- <key>" for a record hash that is not a hash or a record that does not
-- parse. A mark ("-") is no record.
local function recordFor(key, ckey, t, rec)
  local r0, r1 = recordBuckets(ckey, rec)
  if not r0 then
    return false
  end
  local field, best = recordField(key), false
  for _, bucket in ipairs({r0, r1}) do
    local v, err = callOn('HGET', bucket, field)
    if v == nil then
      return nil, err
    end
    if v and v ~= '-' then
      local r = parseRecord(v)
      if not r then
        return foreign(bucket)
      end
      if t then
        if r.b <= t and t <= r.t then
          return r
        end
      elseif not best or r.t > best.t then
        best = r
      end
    end
  end
  return best
end

-- continueRecord is, for a take that creates key's hash with time tokens
-- at server time now (ms) and record time rec, the incarnation it
-- continues: the b (a string) of the name's living record beside the
-- floor ckey, whose field it then marks taken ("-"); nil for a new
-- incarnation (no record; a mark, left by a take whose hash is gone:
-- deleted, or expired; a value this library did not write, left as it
-- is). The current generation's record hash is read first, then the
-- other: a mark in the first is newer than any record in the second.
local function continueRecord(key, ckey, now, rec)
  local r0, r1 = recordBuckets(ckey, rec)
  if not r0 then
    return nil
  end
  if math.floor(now / rec) % 2 == 1 then
    r0, r1 = r1, r0
  end
  local field, bucket = recordField(key), r0
  local v = redis.pcall('HGET', bucket, field)
  if v == false then
    bucket = r1
    v = redis.pcall('HGET', bucket, field)
  end
  if type(v) ~= 'string' or v == '-' then
    return nil
  end
  -- Only b is needed: "<t>/<b> <o>" or "<t> <o>" (b = t), each read
  -- with one anchored pattern; a value parseRecord would refuse (no
  -- owner, b above t, more than 16 digits) is left alone.
  local ts, b = string.match(v, '^([1-9][0-9]*)/([1-9][0-9]*) .')
  if not ts then
    b = string.match(v, '^([1-9][0-9]*) .')
    ts = b
  elseif #b > #ts or (#b == #ts and b > ts) then
    return nil
  end
  if not b or #ts > 16 then
    return nil
  end
  redis.call('HSET', bucket, field, '-')
  return b
end

-- take gives the lock of h to owner: token t (from freshToken, so above
-- the counter), depth 1 at level (a field name), the lease ending at x
-- (ms), metadata meta ("" for none); the counter becomes t. The caller has
-- freed h (free or settle). A hash this creates starts an incarnation: b.
local function take(key, h, owner, t, level, x, mode, now, meta)
  local ts = dec(t)
  local fields = {'o', owner, 't', ts, 'x', dec(x), level, '1'}
  if meta ~= '' then
    fields[#fields + 1], fields[#fields + 2] = 'm', meta
    h.m = meta
  end
  if not h.exists then
    local b = mode > 0 and continueRecord(key, h.ckey, now, h.rec) or ts
    fields[#fields + 1], fields[#fields + 2] = 'b', b
    h.b = tonumber(b)
  elseif h.compact then
    fields[#fields + 1], fields[#fields + 2] = 'b', dec(h.b)
    h.compact = nil
  end
  redis.call('HSET', key, unpack(fields))
  setCounter(h, ts, mode)
  h.exists, h.o, h.t, h.ts, h.c, h.x, h.held = true, owner, t, ts, t, x, x > now
  h.levels, h.depth = {string.sub(level, 3)}, 1
  keep(key, h, mode, now)
  return ts
end

-- free removes the lease and every level of h; with expired set, it
-- records the ownership as expired (e:<T>), keeping the 16 with the highest
-- tokens and raising w to the token of one dropped. Nothing is written when
-- h holds no lease.
local function free(key, h, expired)
  if not h.x then
    return
  end
  local del = {'x'}
  for _, id in ipairs(h.levels) do
    del[#del + 1] = 'l:' .. id
  end
  if h.m then
    del[#del + 1] = 'm'
    h.m = nil
  end
  if h.qEmpty then
    del[#del + 1] = 'q'
    h.q, h.qEmpty = nil, nil
  end
  if h.p then
    -- A pending hold never had t as its token: nothing to record. One
    -- that created the hash leaves no counter: the hash goes.
    if not h.ts then
      redis.call('DEL', key)
      h.exists, h.o, h.x, h.held, h.levels, h.depth, h.p, h.m = false, nil, nil, false, {}, 0, nil, nil
      return
    end
    del[#del + 1] = 'p'
    h.p, expired = nil, false
  end
  if expired then
    h.expired[h.ts] = h.o
    redis.call('HSET', key, 'e:' .. h.ts, h.o)
    local n, low = 0, nil
    for tok in pairs(h.expired) do
      n = n + 1
      if not low or tonumber(tok) < tonumber(low) then
        low = tok
      end
    end
    if n > 16 then
      h.expired[low] = nil
      del[#del + 1] = 'e:' .. low
      h.w = math.max(h.w or 0, tonumber(low))
      redis.call('HSET', key, 'w', dec(h.w))
    end
  end
  redis.call('HDEL', key, unpack(del))
  h.x, h.held, h.levels, h.depth = nil, false, {}, 0
end

-- compact frees the lock h at the release of its last level when its hash
-- would keep nothing but t, b and o: strict mode (mode 0, no y), no
-- expired or forced record, no w, nobody queued, no pending hold. The hash
-- is deleted and the counter becomes the record "<t> <b> <o>", which
-- lockOf reads back as the hash it replaced: retried releases are answered
-- as before, inspect still says whose the last ownership was, and the next
-- take continues the incarnation (b). A released name then costs one key,
-- not two. A counter found above t (written by hand) is put back, and
-- nothing compacted; nor is a b above t (written by hand), which would
-- make a record parseCounter refuses. true when compacted; false, having written nothing,
-- otherwise.
local function compact(key, h, mode)
  if mode ~= 0 or h.y or h.f or h.w or h.p or (h.q and not h.qEmpty) or next(h.expired)
      or not h.ckey or not h.ts or not h.b or h.b < 1 or h.b > h.t or not h.o then
    return false
  end
  local rec = h.ts .. ' ' .. dec(h.b) .. ' ' .. h.o
  local old = redis.pcall('SET', h.ckey, rec, 'GET')
  if type(old) == 'table' and old.err then
    -- A server before 6.2 (no SET ... GET), or a foreign counter.
    old = redis.pcall('GET', h.ckey)
    if type(old) == 'table' or (old and not parseCounter(old)) or parseCounter(old) > h.t then
      return false
    end
    redis.call('SET', h.ckey, rec)
  elseif old then
    local c = parseCounter(old)
    if not c or c > h.t then
      redis.call('SET', h.ckey, old)
      return false
    end
  end
  redis.call('DEL', key)
  h.compact, h.x, h.held, h.levels, h.depth, h.m, h.o, h.q, h.qEmpty, h.c = true, nil, false, {}, 0, nil, nil, nil, nil, h.t
  return true
end

-- stow frees the lock h at the release of its last level with time tokens
-- when its hash would keep nothing but t, b and o (as compact: no y,
-- expired or forced record, no w, nobody queued, no pending hold): the
-- record goes to the shared record hash (putRecord) and the hash is
-- deleted. A retried release, Inspect and a lost lease's cause then read
-- the record (recordFor), and the next take starts a new incarnation. true
-- when stowed; false, having written nothing, otherwise.
local function stow(key, h, now)
  if h.y or h.f or h.w or h.p or (h.q and not h.qEmpty) or next(h.expired)
      or not h.ckey or not h.ts or not h.b or h.b < 1 or h.b > h.t or not h.o then
    return false
  end
  if not putRecord(key, h.ckey, h.ts, dec(h.b), h.o, now, h.rec) then
    return false
  end
  redis.call('DEL', key)
  h.exists, h.x, h.held, h.levels, h.depth, h.m, h.q, h.qEmpty = false, nil, false, {}, 0, nil, nil, nil
  return true
end

-- settle frees a lock whose lease has passed, recording its ownership as
-- expired; it does nothing to a held or free lock.
local function settle(key, h)
  if h.x and not h.held then
    free(key, h, true)
  end
end
