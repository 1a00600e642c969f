-- The Redis ceiling of scripts/bench.sh: one claim as one atomic script, the same steps as
-- seckill's claim (status -> per-user allowance -> stock -> take, record the user, next order
-- number, enqueue the order on the campaign's stream), run by redis-benchmark via EVALSHA.
--
-- KEYS[1] {c:<id>}:meta   hash: status, remaining, limit
-- KEYS[2] {c:<id>}:users  hash: user -> units held
-- KEYS[3] {c:<id>}:seq    order sequence
-- KEYS[4] {c:<id>}:orders stream of orders
-- ARGV[1] user id, ARGV[2] qty
local meta = redis.call('HMGET', KEYS[1], 'status', 'remaining', 'limit')
if meta[1] ~= 'active' then
  return {meta[1] or 'missing'}
end
local qty = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local limit = tonumber(meta[3])
if held >= limit then
  return {'already_claimed', held}
end
if held + qty > limit then
  return {'over_limit', held}
end
local remaining = tonumber(meta[2])
if remaining < qty then
  return {'sold_out', remaining}
end
redis.call('HINCRBY', KEYS[1], 'remaining', -qty)
redis.call('HINCRBY', KEYS[2], ARGV[1], qty)
local seq = redis.call('INCR', KEYS[3])
redis.call('XADD', KEYS[4], '*', 'seq', seq, 'user', ARGV[1], 'qty', qty)
return {'won', seq}
