-- quick: the quick paths, which every script that uses them has after
-- lib.lua's and queue.lua's helpers (they call both).
--
-- Most calls meet a lock in one state: free (never used, compacted in
-- strict mode, or a time-mode record of the last ownership) for an
-- acquire, held at depth 1 by the caller for its release, with nobody
-- queued; under contention, held by another owner
-- for a waiting acquire, and a release with someone queued. For those,
-- the general path's parsing (every field into a table, the token mode,
-- the e:/f/w records) costs more than the commands themselves, so
-- quickTake (with quickQueue) and quickRelease (with quickHandOn)
-- recognise exactly those states with a few comparisons and do what the
-- general path would do there, command for command. Anything else
-- (another field, a malformed value, an error reply) makes them return
-- nil, with the hash as HGETALL read it when it read it without error,
-- and the script goes on with the general path (begin takes that reply),
-- which then answers as it always did. They write nothing before
-- returning nil, but for the counter quickRelease and quickHandOn found
-- above the token or foreign and quickHandOn's queue head: put back as
-- they were (the head with its score; the counter by SET, which keeps
-- no expiry a foreign value had), which the general path then reads
-- again.
-- The property tests run both paths on the same states (quick_test.go).

-- quickNow returns the server's time in ms.
local function quickNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- quickRead reads the lock key for a quick path: its HGETALL reply (an
-- empty one for no key), the token mode and its record time (modeOf); with
-- time tokens, false in place of the reply plus the value for a hold kept
-- as a string (lib.lua, "Keys"), which they read with GET first (on a
-- hash it fails, and HGETALL follows), then (after that value, nil for a
-- hash) the floor's idle expiry and the record time as decimal strings;
-- nil for a malformed mode or an error reply (another type), which the
-- general path then answers.
local function quickRead(lock, modeArg)
  local mode, rec, idle, recs = modeOf(modeArg)
  if not mode then
    return nil
  end
  if mode > 0 then
    local v = redis.pcall('GET', lock)
    if v == false then
      return {}, mode, rec, nil, idle, recs
    elseif type(v) == 'string' then
      return false, mode, rec, v, idle, recs
    end
  end
  local r = redis.pcall('HGETALL', lock)
  if r.err then
    return nil
  end
  return r, mode, rec, nil, idle, recs
end

-- quickScan reads r, a lock hash's HGETALL reply, when the hash holds no
-- field but o, t and x (canonical), b (canonical or 0), m, q (= 1) and
-- levels (l:<ID> with a canonical depth): true, then o, t, x, b and m as
-- stored (nil when absent), q as a boolean, the number of levels, and the
-- depth stored at level (nil when it is absent); false when there is any
-- other field or value, which lockOf would refuse or a quick path leaves
-- to the general path.
local function quickScan(r, level)
  if #r == 10 and r[1] == 'o' and r[3] == 't' and r[5] == 'x' and r[7] == level and r[9] == 'b' then
    -- The hash quickTake writes, in the order it writes it (a listpack
    -- keeps the order of insertion): o, t, x, the caller's level, b. Read
    -- by position, with the same checks as the loop below.
    local t, x, b, l = r[4], r[6], r[10], r[8]
    if canonical(t) and canonical(x) and (b == '0' or canonical(b)) and (l == '1' or canonical(l)) then
      return true, r[2], t, x, b, nil, false, 1, l
    end
  end
  local o, t, x, b, m, q, n, l = nil, nil, nil, nil, nil, false, 0, nil
  for i = 1, #r, 2 do
    local f, v = r[i], r[i + 1]
    if f == 'o' then
      o = v
    elseif f == 't' and canonical(v) then
      t = v
    elseif f == 'x' and canonical(v) then
      x = v
    elseif f == 'b' and (v == '0' or canonical(v)) then
      b = v
    elseif f == 'm' then
      m = v
    elseif f == 'q' and v == '1' then
      q = true
    elseif string.sub(f, 1, 2) == 'l:' and canonical(v) then
      n = n + 1
      if f == level then
        l = v
      end
    else
      return false
    end
  end
  return true, o, t, x, b, m, q, n, l
end

-- quickQueue is acquire.lua for a waiting caller (member, already
-- checked) when another owner's live ownership holds the lock and its
-- hash has nothing else (o, t, x, b, its levels, maybe m and q: ok and
-- the rest as quickScan read them): the caller joins the queue, or stays
-- in it and renews it (a poll), and gets what is left of the holder's
-- lease. nil, having written
-- nothing, in any other case (the caller's own hold included).
local function quickQueue(lock, queue, owner, member, queueMs, ok, o, t, x, q, levels)
  if not (ok and o and t and x) or o == owner or levels == 0 then
    return nil
  end
  local us, now = clock()
  local xn = tonumber(x)
  if xn <= now then
    return nil
  end
  local added = redis.pcall('ZADD', queue, 'NX', us, member)
  if type(added) ~= 'number' then
    return nil
  end
  refreshQueue(queue, queueMs)
  if not q then
    redis.call('HSET', lock, 'q', '1')
  end
  return {0, xn - now, 0}
end

-- quickFloorToken issues a time token above last (the record's t, 0 for
-- none) and the slot's floor ckey, and raises the floor to it (idle mode
-- ms): the floor is read and raised in one command, SET … PX … GET, with
-- the token the clock and the record give; a floor found at or above it
-- (another name's token of the same µs, or a clock stepped back) raises
-- the token above the floor, written again. It returns the token, as a
-- number and in decimal, and the server's time in ms; nil when the
-- general path must answer: a token at 2^53, a server before 6.2 (no SET
-- … GET: an error reply, nothing written), or a foreign floor, put back
-- as it was but for an expiry it had (the SET replaced it).
local function quickFloorToken(ckey, last, idle)
  local us, now = clock()
  local tok = math.max(last + 1, us)
  if tok >= 9007199254740992 then
    return nil
  end
  local t = dec(tok)
  local v = redis.pcall('SET', ckey, t, 'PX', idle, 'GET')
  if v == false then
    return tok, t, now
  elseif not canonical(v) then
    if type(v) == 'string' then
      redis.call('SET', ckey, v)
    end
    return nil
  end
  local c = tonumber(v)
  if c < tok then
    return tok, t, now
  elseif c + 1 >= 9007199254740992 then
    redis.call('SET', ckey, v, 'PX', idle)
    return nil
  end
  tok = c + 1
  t = dec(tok)
  redis.call('SET', ckey, t, 'PX', idle)
  return tok, t, now
end

-- quickCounterToken issues a strict token above last (the hash's t, 0 for
-- none) and the name's counter ckey, which it reads (the caller writes it
-- with the hash). With no hash (hashed false) the counter may be a
-- compacted record, whose b it returns too. It returns the token, as a
-- number and in decimal, the server's time in ms, and that b (nil
-- for a plain counter); nil, having written nothing, for a foreign
-- counter, a record beside a hash, or a token at 2^53.
local function quickCounterToken(ckey, last, hashed)
  local v = redis.pcall('GET', ckey)
  local c, b
  if v == false then
    c = 0
  elseif type(v) ~= 'string' then
    return nil
  elseif canonical(v) then
    c = tonumber(v)
  elseif hashed then
    return nil
  else
    local ts, bs = string.match(v, '^([1-9][0-9]*) ([1-9][0-9]*) .')
    if not ts or tonumber(bs) > tonumber(ts) then
      return nil
    end
    c, b = tonumber(ts), bs
  end
  local _, now = clock()
  local tok = math.max(c, last) + 1
  if tok >= 9007199254740992 then
    return nil
  end
  return tok, dec(tok), now, b
end

-- quickTake is acquire.lua when the lock hash is absent, or (a record
-- of a released ownership) holds nothing but o, t and b: it takes the
-- lock as take would (the token above the counter and the record's t,
-- and with time tokens at least the server's clock; b continued from the
-- record, a compacted one, or started) and returns acquire's reply; nil,
-- having written nothing, in any other case (with time tokens, the floor
-- it read and wrote in one command is then put back). A caller that would
-- wait (member, its queue member: Lock always passes one) leaves the queue
-- as in acquire.lua when no hash or record exists and an earlier attempt
-- of the call may have queued it (again = "1"); with time tokens the
-- general path does that. Another owner's live hold kept as a string
-- refuses a caller that does not wait here, as acquire.lua would, without
-- the general path's turning it into its hash.
-- The commands, with time tokens on a free name: GET, TIME, SET … PX …
-- GET (the floor), continueRecord's HGET of the current generation's
-- record hash (and of the other when the name is not there) and, when it
-- finds a record, its HSET of the mark, and the hold's SET … PX (a string,
-- lib.lua's "Keys"; with metadata an HSET and a PEXPIRE); on a record left
-- in the hash, GET, HGETALL, TIME, SET … PX … GET, HSET, PEXPIRE; strict:
-- HGETALL, GET, TIME, HSET, SET.
local function quickTake(lock, queue, ckey, owner, ttl, id, member, queueMs, modeArg, meta, again)
  if member ~= '' and not isWaiter(member) then
    return nil
  end
  local r, mode, rec, v, idle = quickRead(lock, modeArg)
  if r == false and member == '' then
    -- A hold kept as a string, to a caller that does not wait: another
    -- owner's live hold refuses it as the general path would, with
    -- nothing written (the general path would turn it into its hash).
    local t, x, _, _, o = splitHold(v)
    if t and o ~= owner then
      local left = tonumber(x) - quickNow()
      if left > 0 then
        return {0, left, 0}
      end
    end
    return nil
  elseif not r then
    -- An error reply, or a hold kept as a string: the general path reads
    -- it again (and a string hold as its hash).
    return nil
  end
  local last = 0
  if #r > 0 then
    local ok, o, t, x, rb, m, q, levels = quickScan(r)
    if x then
      if member ~= '' then
        return quickQueue(lock, queue, owner, member, queueMs, ok, o, t, x, q, levels), r
      end
      return nil, r
    end
    if #r ~= 6 or not (ok and o and t and rb) or m or q or levels > 0 or rb == '0' then
      return nil, r
    end
    last = tonumber(t)
    if tonumber(rb) > last then
      return nil, r
    end
  end
  local lease = tonumber(ttl)
  if not lease then
    return nil
  end
  local tok, t, now, b
  if mode > 0 then
    if member ~= '' and #r == 0 and again == '1' then
      -- A poll that may have queued itself, on a name with no hash: the
      -- general path leaves the queue (its ZREM).
      return nil, r
    end
    tok, t, now = quickFloorToken(ckey, last, idle)
    if not tok then
      return nil, r
    end
    if #r == 0 then
      -- A stowed name's record, while it lives, gives the incarnation.
      b = continueRecord(lock, ckey, now, rec)
    end
  else
    tok, t, now, b = quickCounterToken(ckey, last, #r > 0)
    if not tok then
      return nil
    end
    if member ~= '' and #r == 0 and not b and again == '1' then
      local left = redis.pcall('ZREM', queue, member)
      if type(left) ~= 'number' then
        return nil
      end
    end
  end
  local x = dec(now + lease)
  if #r == 0 and mode > 0 and meta == '' and owner ~= '' and id ~= '' and not string.find(id, ' ', 1, true) then
    -- The commonest hold, kept as a string (lib.lua, "Keys"): one SET
    -- with the hash's expiry. A record's b above the token (the clock
    -- stepped back with the floor lost) stays in a hash, as before.
    local hb = b or t
    if #hb < #t or (#hb == #t and hb <= t) then
      redis.call('SET', lock, holdValue(t, x, hb, id, owner), 'PX', expiryArg(ttl, rec))
      return {1, tok, 1}
    end
  end
  -- One HSET of fixed arity per case: no table to build and unpack.
  if #r > 0 then
    if meta == '' then
      redis.call('HSET', lock, 'o', owner, 't', t, 'x', x, 'l:' .. id, '1')
    else
      redis.call('HSET', lock, 'o', owner, 't', t, 'x', x, 'l:' .. id, '1', 'm', meta)
    end
  elseif meta == '' then
    redis.call('HSET', lock, 'o', owner, 't', t, 'x', x, 'l:' .. id, '1', 'b', b or t)
  else
    redis.call('HSET', lock, 'o', owner, 't', t, 'x', x, 'l:' .. id, '1', 'b', b or t, 'm', meta)
  end
  if mode > 0 then
    redis.call('PEXPIRE', lock, expiryArg(ttl, rec))
  else
    redis.call('SET', ckey, t)
  end
  return {1, tok, 1}
end

-- quickHandOn is release.lua for the last level of a live ownership,
-- token t at level, whose hash (r as HGETALL read it) holds nothing else
-- but the flag q and maybe metadata m, when a waiter is queued and the
-- counter is plain: it hands the lock to the oldest waiter as passOn
-- would (the next token, depth 1 at the waiter's level, a lease of its
-- claim time from now, one message on its channel) and returns 0. In
-- strict mode it writes the counter with SET … GET, which reads it too:
-- one command fewer than passOn's GET and SET. nil plus r in any other
-- case (an empty queue, a malformed head, a counter that is a record or
-- foreign, a token at 2^53), with the head and the counter put back as
-- they were, which the general path then reads again. now and us are the
-- server's time in ms and µs.
local function quickHandOn(lock, queue, ckey, r, t, level, m, now, us, mode, rec, idle)
  local tok = t + 1
  if mode > 0 then
    tok = math.max(tok, us)
  end
  if tok >= 9007199254740992 then
    return nil, r
  end
  local head = redis.pcall('ZPOPMIN', queue)
  if head.err or #head == 0 then
    return nil, r
  end
  local id, claim, owner, channel, meta = parseWaiter(head[1])
  if id and isWake(head[1]) then
    id = nil -- a LockMulti entry: the general path wakes it (nextWaiter)
  end
  local first, old = tok, nil
  if id then
    -- Strict: SET … GET reads and writes in one command. Time tokens:
    -- GET first, so that a value put back keeps its own expiry.
    if mode == 0 then
      old = redis.pcall('SET', ckey, dec(tok), 'GET')
    else
      old = redis.pcall('GET', ckey)
    end
    local c = type(old) == 'string' and canonical(old) and tonumber(old)
    if c and c >= tok then
      -- A counter raised by hand, or a floor another name raised: the
      -- token goes above it, as passOn's.
      tok = c + 1
    elseif not c and old ~= false then
      id = nil
    end
  end
  if not id or tok >= 9007199254740992 then
    if mode == 0 and type(old) == 'string' then
      redis.call('SET', ckey, old)
    end
    redis.call('ZADD', queue, head[2], head[1])
    return nil, r
  end
  if mode > 0 then
    redis.call('SET', ckey, dec(tok), 'PX', idle)
  elseif tok > first then
    redis.call('SET', ckey, dec(tok))
  end
  if m and meta == '' then
    redis.call('HDEL', lock, level, 'm')
  else
    redis.call('HDEL', lock, level)
  end
  local ts = dec(tok)
  local claimMs = tonumber(claim)
  if meta == '' then
    redis.call('HSET', lock, 'o', owner, 't', ts, 'x', dec(now + claimMs), 'l:' .. id, '1')
  else
    redis.call('HSET', lock, 'o', owner, 't', ts, 'x', dec(now + claimMs), 'l:' .. id, '1', 'm', meta)
  end
  if mode > 0 then
    redis.call('PEXPIRE', lock, expiryArg(claim, rec))
  end
  notify(channel, id .. ' ' .. ts)
  return 0
end

-- quickDelete ends a release that stowed or compacted the lock: its key
-- goes, an empty message is published on wake unless that is nil, and
-- release's reply 0 is returned.
local function quickDelete(lock, wake)
  redis.call('DEL', lock)
  if wake then
    redis.pcall('PUBLISH', wake, '')
  end
  return 0
end

-- quickReleaseHeld is quickRelease for a hold kept as a string, v: the
-- caller's live ownership (owner, token, level id) is stowed as stow
-- would and its key deleted, and 0 returned; nil, having written nothing,
-- in any other case (another ownership, an ended lease, a record that
-- cannot be stowed), which the general path then reads again.
local function quickReleaseHeld(lock, ckey, owner, token, id, v, rec, wake)
  local t, x, b, l, o = splitHold(v)
  if not t or o ~= owner or t ~= token or l ~= id or tonumber(t) >= 9007199254740992 then
    return nil
  end
  local _, now = clock()
  if tonumber(x) <= now or not putRecord(lock, ckey, t, b, o, now, rec) then
    return nil
  end
  return quickDelete(lock, wake)
end

-- quickRelease is release.lua for the last level of a live ownership
-- whose hash holds nothing else (o, t, x, b, the level, maybe m and q):
-- with nobody queued it frees the lock (strict: compacts it as compact
-- would; time tokens: stows it as stow would, or where that cannot be
-- done leaves the record o, t, b in the hash to expire as passOn would) and publishes an empty message on wake unless that is nil, with
-- q set quickHandOn hands it on, and it returns 0; nil in any other case
-- (see above for the writes it may then have undone).
local function quickRelease(lock, queue, ckey, owner, token, id, modeArg, wake)
  local r, mode, rec, v, idle, recs = quickRead(lock, modeArg)
  if r == false then
    return quickReleaseHeld(lock, ckey, owner, token, id, v, rec, wake)
  elseif not r then
    return nil
  elseif #r < 10 or #r > 14 then
    return nil, r
  end
  local level = 'l:' .. id
  local ok, o, t, x, b, m, q, levels, l = quickScan(r, level)
  if not (ok and t and x and b) or levels ~= 1 or not l or o ~= owner or t ~= token or b == '0' then
    return nil, r
  end
  local tn = tonumber(t)
  if tn >= 9007199254740992 or tonumber(b) > tn then
    return nil, r
  end
  local us, now = clock()
  local left = tonumber(x) - now
  if left <= 0 then
    return nil, r
  end
  if q then
    return quickHandOn(lock, queue, ckey, r, tn, level, m, now, us, mode, rec, idle)
  end
  if mode > 0 and not putRecord(lock, ckey, t, b, o, now, rec) then
    -- Not stowed (a strict counter, a foreign record hash): the hash
    -- keeps the record, with the expiry the lease gave it.
    if m then
      redis.call('HDEL', lock, 'x', level, 'm')
    else
      redis.call('HDEL', lock, 'x', level)
    end
    if left > rec then
      redis.call('PEXPIRE', lock, recs)
    end
    if wake then
      redis.pcall('PUBLISH', wake, '')
    end
    return 0
  elseif mode == 0 then
    local old = redis.pcall('SET', ckey, t .. ' ' .. b .. ' ' .. o, 'GET')
    if old ~= t and old ~= false then
      -- Not the counter take left, nor none (deleted by hand): compact's
      -- rule, a counter at or below t is replaced. Otherwise (a server
      -- before 6.2 refused the GET, a counter set above t or foreign) it
      -- is put back and the general path decides, as it would have.
      local c = type(old) == 'string' and parseCounter(old)
      if not c or c > tonumber(t) then
        if type(old) == 'string' then
          redis.call('SET', ckey, old)
        end
        return nil, r
      end
    end
  end
  -- Stowed (time tokens) or compacted (strict): the hash goes.
  return quickDelete(lock, wake)
end

-- quickExtend is extend.lua when the hash holds an ownership and nothing
-- else (o, t, x, b, its levels, maybe m and q): the lease is raised to
-- end ttl ms from now, never shortened (with time tokens the hash then
-- expires the record time after it), and 1 returned when the caller's
-- ownership (owner and token) holds the lock; 0, with nothing written,
-- when it does not (expired, another owner or token). nil plus the
-- HGETALL reply r, having written nothing, in any other case.
local function quickExtend(lock, owner, token, ttl, modeArg)
  local r, mode, rec, v = quickRead(lock, modeArg)
  if r == false then
    -- A hold kept as a string: one SET moves its lease and expiry.
    local t, x, b, id, o = splitHold(v)
    local lease = tonumber(ttl)
    if not (t and lease) then
      return nil
    end
    local now = quickNow()
    if tonumber(x) <= now or o ~= owner or t ~= token then
      return 0
    end
    if now + lease > tonumber(x) then
      redis.call('SET', lock, holdValue(t, dec(now + lease), b, id, o), 'PX', expiryArg(ttl, rec))
    end
    return 1
  elseif not r then
    return nil
  end
  local ok, o, t, x, _, _, _, levels = quickScan(r)
  local lease = tonumber(ttl)
  if not (ok and o and t and x and levels > 0 and lease) then
    return nil, r
  end
  local now = quickNow()
  if tonumber(x) <= now or o ~= owner or t ~= token then
    return 0
  end
  if now + lease > tonumber(x) then
    -- As extend.lua with keep: with time tokens the hash expires the
    -- record time after the new lease.
    redis.call('HSET', lock, 'x', dec(now + lease))
    if mode > 0 then
      redis.call('PEXPIRE', lock, expiryArg(ttl, rec))
    end
  end
  return 1
end
