-- ratelimit.lua: charges one request to every rate-limit bucket it falls in, all or nothing
-- (src/guard/rate.rs), with the GCRA arithmetic of src/guard/gcra.rs:
--   tat' = max(tat, now) + T      allow iff tat' - now <= tau   (then tat := tat')
-- Every bucket is checked before any is written, so a refusal leaves no bucket charged.
-- The clock is this Redis server's TIME: one clock for every instance.
--
-- KEYS[i]   {rl}:…       string  the bucket's TAT, microseconds since the epoch; its PEXPIRE
--                                 is the TAT itself, so no key outlives its meaning (a bucket
--                                 whose TAT has passed behaves exactly like a missing one)
-- ARGV[2i-1] T of bucket i (emission interval), microseconds, >= 1
-- ARGV[2i]   tau of bucket i (T * burst), microseconds
--
-- Returns {0} when every bucket was charged, else {i, retry_after_us, reset_us} for the
-- first bucket i that refused.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local next_tats = {}
for i = 1, #KEYS do
  local period = tonumber(ARGV[2 * i - 1])
  local tau = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  local next_tat = tat + period
  if next_tat - now > tau then
    return {i, next_tat - now - tau, tat - now}
  end
  next_tats[i] = next_tat
end
for i = 1, #KEYS do
  local ttl_ms = math.ceil((next_tats[i] - now) / 1000)
  if ttl_ms < 1 then ttl_ms = 1 end
  redis.call('SET', KEYS[i], string.format('%d', next_tats[i]), 'PX', ttl_ms)
end
return {0}
