-- install.lua: puts a campaign into the gate unless it is already there. Used to create a
-- campaign (after the ledger committed it) and to rebuild one from the ledger when Redis does
-- not have it (a process died between the two writes, or Redis lost its data).
--
-- KEYS[1] {c:<id>}:meta      hash   (holders version 'hver' starts at the server's time in µs,
--                                    so a rebuilt campaign never repeats a version seen before)
-- KEYS[2] {c:<id>}:users     hash   user -> units held by active orders
-- KEYS[3] {c:<id>}:codes     list   codes not held by an active order, in hand-out order
-- KEYS[4] {c:<id>}:seq       string highest order number used
-- KEYS[5] {c:<id>}:orders    stream (created with its consumer group)
-- KEYS[6] {c:<id>}:released  set    ids of orders whose units went back (cancel, poison)
-- KEYS[7] {c:<id>}:held      hash   pending orders (order_id -> user, qty, at, pay_by, codes…)
-- KEYS[8] {c:<id>}:deadlines zset   order_id by pay_by (µs)
-- ARGV[1] id          ARGV[2] kind ('stock' | 'codes')   ARGV[3] total   ARGV[4] remaining
-- ARGV[5] limit       ARGV[6] status                      ARGV[7] starts (µs or '')
-- ARGV[8] ends (µs or '')   ARGV[9] seq   ARGV[10] consumer group name
-- ARGV[11] hold seconds ('' = a campaign without holds)
-- ARGV[12] U = number of users, then U pairs (user, held)
-- then R = number of released order ids, then R ids,
-- then P = number of pending orders, then P triples (order_id, pay_by µs, held lines),
-- then every pooled code. The pending orders' units are in the users' holdings already;
-- meta 'pending' is their sum.
-- Returns 1 if installed, 0 if the campaign was already there.

if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end

local CHUNK = 1000
local function push_range(cmd, key, first, last, step)
  local i = first
  while i <= last do
    local j = math.min(last, i + CHUNK * step - 1)
    redis.call(cmd, key, unpack(ARGV, i, j))
    i = j + 1
  end
end

redis.call('DEL', KEYS[2], KEYS[3], KEYS[6], KEYS[7], KEYS[8])
local users = tonumber(ARGV[12])
local at = 13
if users > 0 then push_range('HSET', KEYS[2], at, at + 2 * users - 1, 2) end
at = at + 2 * users
local released = tonumber(ARGV[at])
at = at + 1
if released > 0 then push_range('SADD', KEYS[6], at, at + released - 1, 1) end
at = at + released
local held = tonumber(ARGV[at])
at = at + 1
local pending = 0
for i = 0, held - 1 do
  local id, pay_by, lines = ARGV[at + 3 * i], ARGV[at + 3 * i + 1], ARGV[at + 3 * i + 2]
  redis.call('HSET', KEYS[7], id, lines)
  redis.call('ZADD', KEYS[8], pay_by, id)
  pending = pending + tonumber(string.match(lines, '^[^\n]*\n([^\n]*)'))
end
at = at + 3 * held
if at <= #ARGV then push_range('RPUSH', KEYS[3], at, #ARGV, 1) end

local seq = tonumber(redis.call('GET', KEYS[4]) or '0')
if tonumber(ARGV[9]) > seq then redis.call('SET', KEYS[4], ARGV[9]) end
local ok = redis.pcall('XGROUP', 'CREATE', KEYS[5], ARGV[10], '0', 'MKSTREAM')
if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP') then
  return redis.error_reply(ok.err)
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'kind', ARGV[2], 'total', ARGV[3],
           'remaining', ARGV[4], 'limit', ARGV[5], 'status', ARGV[6],
           'starts', ARGV[7], 'ends', ARGV[8])
if ARGV[11] ~= '' then
  redis.call('HSET', KEYS[1], 'hold', ARGV[11], 'pending', string.format('%d', pending))
end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'hver', string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])))
return 1
