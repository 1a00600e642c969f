-- release.lua: safe release: deletes the lease only if the caller's token holds it
-- (compare-and-delete in one step, never a GET then a DEL).
--
-- KEYS[1] seckill:lock:{<name>}:holder  hash  token, owner, fence
-- ARGV[1] token
-- Returns 1 when released, 0 when the token does not hold the lock.

if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
