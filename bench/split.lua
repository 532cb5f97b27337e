#!lua name=redfence_bench_split
-- split: what the split workload (split.go) compares redfence's scripts
-- with, on the same server in the same run. take and release run exactly
-- the commands of redfence's acquire and release for an uncontended pair
-- with its default time tokens (lua/acquire.lua and lua/release.lua on a
-- free name: one EXISTS of the hold, the queue and the other mode's key,
-- TIME, SET ... KEEPTTL GET of the floor, HSET and PEXPIRE of the hold;
-- then HGETALL and DEL of the hold), with only the Lua that their
-- arguments need and none of the checks; empty runs nothing. All three
-- take the keys and arguments redfence's acquire and release take, so
-- that the differences are the checks and the commands.
--
-- KEYS and ARGV as lua/acquire.lua's (take) and lua/release.lua's
-- (release).
redis.register_function('redfence_bench_split_take', function(KEYS, ARGV)
  redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[4], KEYS[4])
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local ts = string.format('%d', us)
  redis.call('SET', KEYS[3], ts, 'KEEPTTL', 'GET')
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', ts, 'l:' .. ARGV[3], '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return us
end)
redis.register_function('redfence_bench_split_release', function(KEYS, ARGV)
  redis.call('HGETALL', KEYS[1])
  redis.call('DEL', KEYS[1])
  return 0
end)
redis.register_function('redfence_bench_split_empty', function(KEYS, ARGV)
  return 0
end)
