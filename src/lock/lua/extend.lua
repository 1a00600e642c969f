-- extend.lua: gives the lease a new TTL, only if the caller's token still holds the lock
-- (compare-and-expire in one step).
--
-- KEYS[1] seckill:lock:{<name>}:holder  hash  token, owner, fence
-- ARGV[1] token   ARGV[2] new ttl in ms
-- Returns the holder's fence when extended, 0 when the token does not hold the lock.

if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tonumber(redis.call('HGET', KEYS[1], 'fence'))
