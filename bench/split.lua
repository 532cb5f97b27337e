#!lua name=redfence_bench_split
-- split: what the split workload (split.go) compares redfence's scripts
-- with, on the same server in the same run. take and release run exactly
-- the commands of redfence's quick paths for an uncontended pair with its
-- default time tokens, on a name released before (lua/quick.lua's
-- quickTake, which continues the stowed record, marks it and writes the
-- hold as a string, and quickRelease, which stows: GET, TIME, SET ... PX
-- ... GET, HGET, HSET of the mark, SET ... PX; then GET, TIME, EXISTS,
-- HSET of the record, DEL), with only the Lua that their arguments need
-- and none of the checks; empty runs nothing. All three take the keys and
-- arguments redfence's acquire and release take, so that the differences
-- are the checks and the commands.
--
-- KEYS[1] the lock key, KEYS[3] the floor; ARGV as lua/acquire.lua's
-- (take) and lua/release.lua's (release). The expiries are redfence's
-- defaults (the floor 7 days, the record 1 minute), written as constants,
-- and every expiry goes to redis.call as a string, as lua/lib.lua's msArg
-- gives them (the hold's, lease + record time, made once per lease).
-- The record is the field of the floor's record hash r60000:0 (the default record time's), as for a name
-- released again in the same generation: a field already there, so no
-- expiry.
local holdPX = {}
redis.register_function('redfence_bench_split_take', function(KEYS, ARGV)
  redis.call('GET', KEYS[1])
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local ts = string.format('%d', us)
  redis.call('SET', KEYS[3], ts, 'PX', '604800000', 'GET')
  local bucket, field = string.sub(KEYS[3], 1, -2) .. 'r60000:0', string.sub(KEYS[1], 10)
  redis.call('HGET', bucket, field)
  redis.call('HSET', bucket, field, '-')
  local lease = tonumber(ARGV[2])
  local px = holdPX[ARGV[2]]
  if not px then
    px = string.format('%d', lease + 60000)
    holdPX[ARGV[2]] = px
  end
  redis.call('SET', KEYS[1], ts .. ' ' .. string.format('%d', math.floor(us / 1000) + lease) .. ' ' .. ts .. ' ' .. ARGV[3] .. ' ' .. ARGV[1], 'PX', px)
  return {1, us, 1}
end)
redis.register_function('redfence_bench_split_release', function(KEYS, ARGV)
  redis.call('GET', KEYS[1])
  redis.call('TIME')
  redis.call('EXISTS', KEYS[1] .. ':t')
  redis.call('HSET', string.sub(KEYS[3], 1, -2) .. 'r60000:0', string.sub(KEYS[1], 10), ARGV[2] .. ' ' .. ARGV[1])
  redis.call('DEL', KEYS[1])
  return 0
end)
redis.register_function('redfence_bench_split_empty', function(KEYS, ARGV)
  return 0
end)
