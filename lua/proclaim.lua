-- proclaim: an election's writes to its term's metadata (reentrant's
-- Election), "\29<since> <seq> <value>": the byte 0x1d (which no plain
-- lock's metadata holds), when the term began (server time in ms, "0"
-- until stamped), how many proclaims it has had, and the value.
--
-- KEYS[1]  the hold  P:{N}  (lib.lua)
-- ARGV[1]  "proclaim" or "stamp"
-- ARGV[2]  the term's token
-- ARGV[3]  proclaim: the owner ID
-- ARGV[4]  proclaim: the new value (no control character)
--
-- proclaim: when the ownership (owner and token) holds the lock with a
-- term's metadata, the value changes, seq rises and since stays; returns
-- 1, else 0 with nothing written.
-- stamp (anyone): when the ownership with that token holds the lock with a
-- term not yet stamped, since becomes the server's clock. Returns the
-- metadata ("" for none) while that ownership holds the lock, else 0.
-- Neither touches the lease or the levels.
-- Errors: FOREIGN (lib.lua), "ERR bad proclaim mode".
local mode = ARGV[1]
if mode ~= 'proclaim' and mode ~= 'stamp' then
  return redis.error_reply('ERR bad proclaim mode')
end
local o, ts, _, _, meta = holdOf(KEYS[1], nil, true)
if o == nil then
  return ts
elseif not (o and ts == ARGV[2]) then
  return 0
end
local since, seq, value = string.match(meta or '', '^\29(%d+) (%d+) (.*)$')
if since and not ((since == '0' or canonical(since)) and (seq == '0' or canonical(seq) and seq ~= '9007199254740991'))
  or not since and string.byte(meta or '', 1) == 29 then
  return redis.error_reply('FOREIGN ' .. KEYS[1])
end
if mode == 'stamp' then
  if since == '0' then
    meta = '\29' .. string.sub(clock(), 1, -4) .. ' ' .. seq .. ' ' .. value
    redis.call('HSET', KEYS[1], 'm', meta)
  end
  return meta or ''
elseif o ~= ARGV[3] or not since then
  return 0
end
redis.call('HSET', KEYS[1], 'm', '\29' .. since .. ' ' .. dec(tonumber(seq) + 1) .. ' ' .. ARGV[4])
return 1
