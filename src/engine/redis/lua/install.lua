-- install.lua: puts a campaign into the gate unless it is already there. Used to create a
-- campaign (after the ledger committed it) and to rebuild one from the ledger when Redis does
-- not have it (a process died between the two writes, or Redis lost its data).
--
-- Holders, pooled codes and released order ids were written beforehand, in chunks, into
-- staging keys private to this installation (see engine/redis/rebuild.rs): a campaign of a
-- million buyers never travels in one command. This script moves them into place atomically,
-- or drops them if the campaign is already there.
--
-- KEYS[1] {c:<id>}:meta      hash
-- KEYS[2] {c:<id>}:users     hash   user -> units held by active orders
-- KEYS[3] {c:<id>}:codes     list   codes not held by an active order, in hand-out order
-- KEYS[4] {c:<id>}:seq       string highest order number used
-- KEYS[5] {c:<id>}:orders    stream (created with its consumer group)
-- KEYS[6] {c:<id>}:released  set    ids of orders whose units went back (cancel, poison)
-- KEYS[7..9]  staged users (hash), codes (list), released (set); any may be absent
-- KEYS[10]    staged codes held by active orders (set), dropped here
-- ARGV[1] id          ARGV[2] kind ('stock' | 'codes')   ARGV[3] total   ARGV[4] remaining
-- ARGV[5] limit       ARGV[6] status                      ARGV[7] starts (µs or '')
-- ARGV[8] ends (µs or '')   ARGV[9] seq   ARGV[10] consumer group name
-- Returns 1 if installed, 0 if the campaign was already there.

if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[7], KEYS[8], KEYS[9], KEYS[10])
  return 0
end

redis.call('DEL', KEYS[2], KEYS[3], KEYS[6], KEYS[10])
for i, final in ipairs({KEYS[2], KEYS[3], KEYS[6]}) do
  local staged = KEYS[6 + i]
  if redis.call('EXISTS', staged) == 1 then
    redis.call('RENAME', staged, final)
    redis.call('PERSIST', final)
  end
end

local seq = tonumber(redis.call('GET', KEYS[4]) or '0')
if tonumber(ARGV[9]) > seq then redis.call('SET', KEYS[4], ARGV[9]) end
local ok = redis.pcall('XGROUP', 'CREATE', KEYS[5], ARGV[10], '0', 'MKSTREAM')
if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP') then
  return redis.error_reply(ok.err)
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'kind', ARGV[2], 'total', ARGV[3],
           'remaining', ARGV[4], 'limit', ARGV[5], 'status', ARGV[6],
           'starts', ARGV[7], 'ends', ARGV[8])
return 1
