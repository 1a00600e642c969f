-- Seed 002's claim script as the seed writes it (/work/shared/seeds/002, "业务逻辑使用lua脚本方案"):
-- has this user bought this ticket before -> stock check -> DECRBY the stock -> remember the
-- buyer. Four Redis commands per won claim. Answers 1 won, 0 already claimed, 2 sold out,
-- 3 over the limit of 2 per user.
--
-- KEYS[1] user_id:<user>  set of the tickets this user bought
-- ARGV[1] air_id:<ticket> the ticket's stock (a string counter; the seed reads it as ARGV)
-- ARGV[2] qty
local hasSecKill = redis.call('sismember', KEYS[1], ARGV[1])
if hasSecKill ~= 0 then
  return 0
end
local airStoreCount = tonumber(redis.call('get', ARGV[1]) or '0')
local airBuyCount = tonumber(ARGV[2])
if airBuyCount > 2 then
  return 3
end
if airStoreCount - airBuyCount < 0 then
  return 2
end
redis.call('DECRBY', ARGV[1], airBuyCount)
redis.call('sadd', KEYS[1], ARGV[1])
return 1
