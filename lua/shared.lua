-- shared: the helpers of the read-write lock and the semaphore (sacquire.lua,
-- srelease.lua), built after lib.lua's and queue.lua's.
--
-- Keys of a read-write lock N under the prefix R (the client's, then ":rw"),
-- all in the slot of {N}:
--   R:{N}        the writer's hold (lib.lua's hold; its expiry the lease)
--   R:{N}:r      the readers: a set of owners, each with a hold R:{N}:r:<owner>
--                (lib.lua's, its token the epoch it reads, q set once a
--                waiter queued behind it); a release takes its owner out,
--                and the scripts that read the set drop the owners whose
--                hold has expired
--   R:{N}:e      the epoch: the token of the last write lease granted (it
--                expires with the floor's idle time, time tokens only)
--   R:{N}:q, R:{N}:t, R:{S}:f   the queue and the tokens, as a lock's
-- Keys of a semaphore N under S (the client's prefix, then ":sem"):
--   S:{N}:h      the permits: a hash of owner -> "<slot> <number of
--                permits>"; each permit a hold S:{N}:h:<owner>
--                (lib.lua's, its m field the slot); kept as R:{N}:r is
--   S:{N}:q, S:{N}:t, S:{S}:f   as a lock's
-- A queue member's metadata is its kind: "r" (a reader), "w" (a writer),
-- or "s<permits>" (a permit). The scripts are given the base key (R:{N} or
-- S:{N}) and name the others from it, as release.lua names the queue.

-- sharedKeys names the keys of the lock whose base key is B, for owner's
-- hold of kind k ("r", "w" or "s").
local function sharedKeys(B, k, owner)
  local K = {queue = B .. ':q', writer = B, epoch = B .. ':e', index = B .. (k == 's' and ':h' or ':r')}
  K.hold = k == 'w' and B or K.index .. ':' .. owner
  return K
end

-- sharedOf reads a read-write lock's or a semaphore's state (kind "s" for
-- a semaphore): K.index's live holders (a hold at K.index:<owner>; an
-- entry whose hold has expired is dropped), as {owner = slot or true}, and
-- their number; the writer (its owner, or false; RW only); the count of a
-- live semaphore. nil plus an error reply for a key not this library's.
local function sharedOf(K, kind)
  local ms, err = callOn(kind == 's' and 'HGETALL' or 'SMEMBERS', K.index)
  if not ms then
    return nil, err
  end
  local st, gone, step = {hs = {}, n = 0, used = {}, writer = false}, {}, kind == 's' and 2 or 1
  for i = 1, #ms, step do
    local o = ms[i]
    if redis.call('EXISTS', K.index .. ':' .. o) == 1 then
      st.hs[o], st.n = true, st.n + 1
      if step == 2 then
        local slot, count = string.match(ms[i + 1], '^(%d+) (%d+)$')
        if not slot then
          return refuse(K.index)
        end
        st.hs[o], st.used[slot], st.count = slot, true, tonumber(count)
      end
    else
      gone[#gone + 1] = o
    end
  end
  -- In chunks: Lua's unpack stops at 8000 values, and crashed holders
  -- pile up while no script reads the index.
  for j = 1, #gone, 512 do
    redis.call(step == 2 and 'HDEL' or 'SREM', K.index, unpack(gone, j, math.min(j + 511, #gone)))
  end
  if kind ~= 's' then
    local o, oerr = holdOf(K.writer, nil, true)
    if o == nil then
      return nil, oerr
    end
    st.writer = o
  end
  return st
end

-- admits reports whether st lets a holder of kind k in now.
local function admits(st, k)
  if k == 'w' then
    return not st.writer and st.n == 0
  elseif k == 'r' then
    return not st.writer
  end
  return st.n < st.count
end

-- admit gives owner o a hold of kind k (at level, lease ms, the q flag
-- when q: someone may wait) and records it in st: a writer a fresh token,
-- which becomes the epoch; a reader the epoch (a fresh token when none
-- lives); a permit a fresh token and the lowest free slot. Returns the
-- token (a decimal) and the slot, or nil plus an error reply.
local function admit(M, K, st, k, o, level, ms, q)
  local hold, t, slot, err = K.index .. ':' .. o, nil, nil, nil
  if k == 'r' then
    t, err = callOn('GET', K.epoch)
    if t == nil then
      return nil, err
    elseif t and not tokenOf(K.epoch, t) then
      return refuse(K.epoch)
    end
  end
  if not t then
    t, err = issue(M, K.counter)
    if not t then
      return nil, err
    end
    t = type(t) == 'string' and t or dec(t)
    if k ~= 's' and M.idle > 0 then
      redis.call('SET', K.epoch, t, 'PX', M.px)
    elseif k ~= 's' then
      redis.call('SET', K.epoch, t)
    end
  end
  if k == 'w' then
    hold, st.writer = K.writer, o
  elseif k == 'r' then
    redis.call('SADD', K.index, o)
  else
    slot = 0
    while st.used[dec(slot)] do
      slot = slot + 1
    end
    st.used[dec(slot)] = true
    redis.call('HSET', K.index, o, dec(slot) .. ' ' .. dec(st.count))
  end
  grant(hold, o, t, level, ms, slot and dec(slot) or '', q)
  if k ~= 'w' then
    st.hs[o], st.n = slot or true, st.n + 1
  end
  return t, slot
end

-- dispatch admits the waiters at the head of K.queue that st lets in,
-- oldest first, none jumping another; each is handed its hold for its
-- claim time and told "<level ID> <token>" ("<level ID> <token> <slot>"
-- for a permit), but self (the calling member), which is given ms and
-- told by the reply. A waiter whose owner holds its kind already leaves
-- the queue told "<level ID> 0", and reenters by itself. Returns the
-- caller's token and slot, or false; nil plus an error reply.
local function dispatch(M, K, st, self, ms)
  local n, mine, slot, from = 0, false, nil, 0
  while from >= 0 do
    local page, err = callOn('ZRANGE', K.queue, from, from + 15)
    if not page then
      return nil, err
    end
    for i = 1, #page do
      local id, claim, o, channel, meta = parseWaiter(page[i])
      local k = meta and string.sub(meta, 1, 1)
      if not id or not (k == 'r' or k == 'w' or k == 's') then
        return refuse(K.queue)
      elseif k == 's' and not st.count then
        st.count = tonumber(string.sub(meta, 2)) or 1
      end
      local mself = page[i] == self
      if not mself and (k == 'w' and st.writer == o or k ~= 'w' and st.hs[o]) then
        -- Its owner holds this kind already (another call of the owner):
        -- a grant would write a second hold over the first (a permit's
        -- second slot and token, a claim-time expiry on a live hold).
        -- Woken with token 0, it reenters that hold by itself.
        n = n + 1
        notify(channel, id .. ' 0')
      elseif not (k == 'r' and st.writer == o) and not admits(st, k) then
        -- (the writer's owner reads at once: a downgrade)
        from = -1
        break
      else
        local t, s = admit(M, K, st, k, o, 'l:' .. id, mself and ms or claim, true)
        if not t then
          return nil, s
        end
        n = n + 1
        if mself then
          mine, slot = t, s
        elseif s then
          notify(channel, id .. ' ' .. t .. ' ' .. dec(s)) -- a permit: its slot too
        else
          notify(channel, id .. ' ' .. t)
        end
      end
    end
    if from >= 0 then
      from = #page == 16 and from + 16 or -1
    end
  end
  if n > 0 then
    redis.call('ZREMRANGEBYRANK', K.queue, 0, n - 1)
  end
  return mine, slot
end

-- queuedBehind sets the q flag of every live hold in st: a waiter has
-- queued, and the release of any of them must look at the queue.
local function queuedBehind(K, st)
  if st.writer then
    redis.call('HSET', K.writer, 'q', '1')
  end
  for o in pairs(st.hs) do
    redis.call('HSET', K.index .. ':' .. o, 'q', '1')
  end
end

-- readmit runs dispatch for the waiters of K.queue (kind k's lock, tokens
-- in mode M from K.counter) once a hold or a queue entry has gone, if any
-- wait. true, or nil plus an error reply.
local function readmit(M, K, k)
  if redis.call('EXISTS', K.queue) == 0 then
    return true
  end
  local st, err = sharedOf(K, k)
  if not st then
    return nil, err
  end
  local ok, derr = dispatch(M, K, st, '', '1')
  if ok == nil then
    return nil, derr
  end
  return true
end
