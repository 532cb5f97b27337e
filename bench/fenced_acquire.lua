-- fenced_acquire: take a lock and issue its fencing token in one step.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter, a key of its own that outlives the lock
-- ARGV[1]  the caller's value for the lock key, unique per acquisition
-- ARGV[2]  the lease in milliseconds
--
-- Returns the new token (the counter + 1) when the lock was free, 0 when
-- another acquisition holds it, which is left alone and issues nothing.
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
  return redis.call('incr', KEYS[2])
end
return 0
