-- acquire.lua: grants a lease on one lock name if nobody holds it, with the next fence.
-- The holder and the fence counter share the hash tag {name}, so one script (one slot of a
-- Cluster) decides. The fence is max(counter + 1, floor), floor = this server's clock in
-- microseconds rounded down to the millisecond (ms × 1000): a Redis restarted without
-- persistence, or a replica promoted with a counter that lags, still hands out fences above
-- every earlier one as long as fewer than 1,000 grants per millisecond were made on the name
-- and the server clocks did not go back (docs/LOCKS.md).
--
-- KEYS[1] seckill:lock:{<name>}:holder  hash  token, owner, fence (expires with the lease, PX)
-- KEYS[2] seckill:lock:{<name>}:fence   string  highest fence handed out (never expires)
-- ARGV[1] token   ARGV[2] ttl in ms   ARGV[3] owner
-- Returns {1, fence, ttl} when granted, {0, pttl of the current holder, 0} when held.

local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  if pttl < 0 then pttl = 0 end
  return {0, pttl, 0}
end
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + math.floor(tonumber(t[2]) / 1000) * 1000
local fence = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if fence < floor then fence = floor end
local f = string.format('%d', fence)
redis.call('SET', KEYS[2], f)
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[3], 'fence', f)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, fence, tonumber(ARGV[2])}
