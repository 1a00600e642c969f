-- cancel_hold.lua: cancels a pending order: takes it out of the held hash and the deadlines
-- exactly once (see confirm.lua), gives its units, codes and allowance back as release.lua
-- does (and marks it released, so a later release of the same order changes nothing), and
-- appends the 'cancelled' transition to the campaign's stream in the same step.
--
-- KEYS[1…8] as confirm.lua: meta, users, codes, released, held, deadlines, resolved, orders
-- ARGV[1] order id
-- ARGV[2] 'cluster' on a Redis Cluster: nothing is resolved on a node whose replication lineage
--         the campaign was not checked on (claims.lua ARGV[5]); answers 'unchecked' with ''.
--         The transition entry then carries that lineage ('lineage', claims.lua KEYS[5])
-- Returns {tag, value}: 'cancelled' with the resolved record (state, resolved_at, held lines);
-- 'resolved' with the record of an earlier resolution; 'none' with the hold seconds ('' = a
-- campaign without holds) when the order is not pending here; 'missing' or 'fenced' with ''.

local m = redis.call('HMGET', KEYS[1], 'id', 'fenced', 'hold', 'total', 'remaining', 'checked')
if not m[1] then return {'missing', ''} end
if m[2] then return {'fenced', ''} end
if ARGV[2] == 'cluster'
    and m[6] ~= string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') then
  return {'unchecked', ''}
end
local id = ARGV[1]
local done = redis.call('HGET', KEYS[7], id)
if done then return {'resolved', done} end
local held = redis.call('HGET', KEYS[5], id)
if not held then return {'none', m[3] or ''} end

local function int(n) return string.format('%d', n) end
local f = {}
for line in string.gmatch(held .. '\n', '([^\n]*)\n') do f[#f + 1] = line end
local user, qty, at, pay_by = f[1], tonumber(f[2]), f[3], f[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

redis.call('HDEL', KEYS[5], id)
redis.call('ZREM', KEYS[6], id)
redis.call('HINCRBY', KEYS[1], 'pending', -qty)
redis.call('SADD', KEYS[4], id)
local remaining = math.min(tonumber(m[5]) + qty, tonumber(m[4]))
redis.call('HSET', KEYS[1], 'remaining', int(remaining))
local left = tonumber(redis.call('HGET', KEYS[2], user) or '0') - qty
if left > 0 then redis.call('HSET', KEYS[2], user, int(left)) else redis.call('HDEL', KEYS[2], user) end
redis.call('HINCRBY', KEYS[1], 'hver', 1)
for i = #f, 5, -1 do redis.call('LPUSH', KEYS[3], f[i]) end
local record = 'cancelled\n' .. int(now) .. '\n' .. held
redis.call('HSET', KEYS[7], id, record)
local entry = {'kind', 'cancelled', 'resolved_at', int(now), 'order_id', id, 'user', user,
               'qty', int(qty), 'at', at, 'pay_by', pay_by}
if #f > 4 then
  entry[#entry + 1] = 'codes'; entry[#entry + 1] = table.concat(f, '\n', 5)
end
if ARGV[2] == 'cluster' then entry[#entry + 1] = 'lineage'; entry[#entry + 1] = m[6] end
redis.call('XADD', KEYS[8], '*', unpack(entry))
return {'cancelled', record}
