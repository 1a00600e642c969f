-- raise.lua: Redlock's fence write-back. Raises this node's fence counter to the fence of a
-- grant (the highest over the majority that granted it), only while the caller's token still
-- holds the lock on this node, so any later grant that goes through this node sees it.
--
-- KEYS[1] seckill:lock:{<name>}:holder  hash  token, owner, fence
-- KEYS[2] seckill:lock:{<name>}:fence   string  highest fence handed out
-- ARGV[1] token   ARGV[2] fence of the grant
-- Returns 1 when raised (or already as high), 0 when the token no longer holds the lock here.

if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
local want = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < want then
  redis.call('SET', KEYS[2], ARGV[2])
end
redis.call('HSET', KEYS[1], 'fence', ARGV[2])
return 1
