-- quick: the quick paths, which every script that uses them has after
-- lib.lua's and queue.lua's helpers (they call both).
--
-- Most calls meet a lock in one state: free and compacted (or never
-- used) for an acquire, held at depth 1 by the caller for its release, in
-- strict mode with nobody queued. For those, the general path's parsing
-- (every field into a table, the token mode, the e:/f/w records) costs
-- more than the commands themselves, so quickTake and quickRelease
-- recognise exactly that state with a few comparisons and do what the
-- general path would do there, command for command. Anything else
-- (another field, a malformed value, an error reply) makes them return
-- nil, with the hash as HGETALL read it when it read it without error,
-- and the script goes on with the general path (begin takes that reply),
-- which then answers as it always did. They write nothing before
-- returning nil, but for quickRelease's counter found above the token or
-- foreign: put back as it was, which the general path then does again.
-- The property tests run both paths on the same states (quick_test.go).

-- quickNow returns the server's time in ms.
local function quickNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- quickTake is acquire.lua in strict mode when the lock hash is absent:
-- it takes the lock as take would (counter + 1, b continued from a
-- compacted record or started) and returns acquire's reply; nil, having
-- written nothing, in any other case. A caller that would wait (member,
-- its queue member: Lock always passes one) leaves the queue as in
-- acquire.lua when no record says the hash was compacted.
local function quickTake(lock, queue, ckey, owner, ttl, id, member, modeArg, meta)
  if modeArg ~= '0' or (member ~= '' and not parseWaiter(member)) then
    return nil
  end
  local r = redis.pcall('HGETALL', lock)
  if r.err then
    return nil
  elseif #r > 0 then
    return nil, r
  end
  local v = redis.pcall('GET', ckey)
  local c, b
  if v == false then
    c = 0
  elseif type(v) ~= 'string' then
    return nil
  elseif canonical(v) then
    c = tonumber(v)
  else
    local ts, bs = string.match(v, '^([1-9][0-9]*) ([1-9][0-9]*) .')
    if not ts or tonumber(bs) > tonumber(ts) then
      return nil
    end
    c, b = tonumber(ts), bs
  end
  local lease = tonumber(ttl)
  if c + 1 >= 9007199254740992 or not lease then
    return nil
  end
  if member ~= '' and not b then
    local left = redis.pcall('ZREM', queue, member)
    if type(left) ~= 'number' then
      return nil
    end
  end
  local t = dec(c + 1)
  local x = dec(quickNow() + lease)
  if meta == '' then
    redis.call('HSET', lock, 'o', owner, 't', t, 'x', x, 'l:' .. id, '1', 'b', b or t)
  else
    redis.call('HSET', lock, 'o', owner, 't', t, 'x', x, 'l:' .. id, '1', 'b', b or t, 'm', meta)
  end
  redis.call('SET', ckey, t)
  return {1, c + 1, 1}
end

-- quickRelease is release.lua for the last level of a live strict
-- ownership whose hash holds nothing else (o, t, x, b, the level, maybe
-- m): it compacts the lock as compact would and returns 0; nil in any
-- other case (see above for the one write it may then have undone).
local function quickRelease(lock, ckey, owner, token, id, modeArg)
  if modeArg ~= '0' then
    return nil
  end
  local r = redis.pcall('HGETALL', lock)
  if r.err then
    return nil
  elseif #r < 10 or #r > 12 then
    return nil, r
  end
  local level = 'l:' .. id
  local o, t, x, b, l
  for i = 1, #r, 2 do
    local f, v = r[i], r[i + 1]
    if f == 'o' then
      o = v
    elseif f == 't' then
      t = v
    elseif f == 'x' then
      x = v
    elseif f == 'b' then
      b = v
    elseif f == level then
      l = v
    elseif f ~= 'm' then
      return nil, r
    end
  end
  if o ~= owner or t ~= token or not (l and x and b) or not (canonical(t) and canonical(l)
      and canonical(x) and canonical(b)) or tonumber(t) >= 9007199254740992
      or tonumber(b) > tonumber(t) or tonumber(x) <= quickNow() then
    return nil, r
  end
  local old = redis.pcall('SET', ckey, t .. ' ' .. b .. ' ' .. o, 'GET')
  if old ~= t and old ~= false then
    -- Not the counter take left, nor none (deleted by hand): compact's
    -- rule, a counter at or below t is replaced. Otherwise (a server
    -- before 6.2 refused the GET, a counter set above t or foreign) it is
    -- put back and the general path decides, as it would have.
    local c = type(old) == 'string' and parseCounter(old)
    if not c or c > tonumber(t) then
      if type(old) == 'string' then
        redis.call('SET', ckey, old)
      end
      return nil, r
    end
  end
  redis.call('DEL', lock)
  return 0
end
