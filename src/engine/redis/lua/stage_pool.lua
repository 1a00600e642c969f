-- stage_pool.lua: appends the next chunk of a campaign's codes, in hand-out order, to the
-- staged pool of an installation, leaving out the codes held by active orders.
--
-- KEYS[1] staged codes (list)   KEYS[2] staged codes held by active orders (set)
-- ARGV[1] seconds the staging keys live if the installation never finishes
-- ARGV[2…] codes
-- Returns the length of the staged pool.

local free = {}
for i = 2, #ARGV do
  if redis.call('SISMEMBER', KEYS[2], ARGV[i]) == 0 then free[#free + 1] = ARGV[i] end
end
if #free > 0 then redis.call('RPUSH', KEYS[1], unpack(free)) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return redis.call('LLEN', KEYS[1])
