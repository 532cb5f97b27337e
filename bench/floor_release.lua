-- floor_release: delete a lock only if it still holds the caller's value.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the value the caller's SET NX wrote
--
-- Returns 1 when the key held ARGV[1] and was deleted, 0 when it is gone
-- (expired) or holds another acquisition's value, which is left alone.
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
