-- release.lua: gives an order's units, codes and allowance back (cancel, or a poison order the
-- ledger can never take). At most once per order: the order id is remembered in a set, so a
-- retry after a crash, or a second cancel, changes nothing.
--
-- KEYS[1] {c:<id>}:meta      hash  (its holders version 'hver' is bumped)
-- KEYS[2] {c:<id>}:users     hash  user -> units held
-- KEYS[3] {c:<id>}:codes     list  the codes go back to the head, in their order
-- KEYS[4] {c:<id>}:released  set   order ids already released
-- KEYS[5] {c:<id>}:held      hash  pending orders: a released one leaves it (and KEYS[6])
-- KEYS[6] {c:<id>}:deadlines zset  so no later expiry or cancel gives its units back again
-- ARGV[1] order id   ARGV[2] user id   ARGV[3] qty   ARGV[4…] codes of the order
-- Returns 1 if released now, 0 if it had been already, -1 if the campaign is not in Redis.

local m = redis.call('HMGET', KEYS[1], 'total', 'remaining')
if not m[1] then return -1 end
if redis.call('SADD', KEYS[4], ARGV[1]) == 0 then return 0 end
local qty = tonumber(ARGV[3])
local remaining = math.min(tonumber(m[2]) + qty, tonumber(m[1]))
redis.call('HSET', KEYS[1], 'remaining', string.format('%d', remaining))
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') - qty
if held > 0 then
  redis.call('HSET', KEYS[2], ARGV[2], string.format('%d', held))
else
  redis.call('HDEL', KEYS[2], ARGV[2])
end
redis.call('HINCRBY', KEYS[1], 'hver', 1)
if KEYS[5] and redis.call('HDEL', KEYS[5], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[6], ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'pending', -qty)
end
for i = #ARGV, 4, -1 do redis.call('LPUSH', KEYS[3], ARGV[i]) end
return 1
