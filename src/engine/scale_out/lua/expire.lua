-- expire.lua: expires the pending orders of one campaign whose pay_by is at or before this
-- Redis server's TIME, earliest first, at most ARGV[1] of them. Each is taken out of the held
-- hash and the deadlines exactly once (see confirm.lua), its units, codes and allowance go
-- back as release.lua gives them (and it is marked released), and its 'expired' transition is
-- appended to the campaign's stream, all in this one step: any instance may run it, and no
-- order is ever expired twice.
--
-- KEYS[1…8] as confirm.lua: meta, users, codes, released, held, deadlines, resolved, orders
-- ARGV[1] most orders expired in this call
-- ARGV[2] 'cluster' on a Redis Cluster: nothing expires on a node whose replication lineage the
--         campaign was not checked on (claims.lua ARGV[5]); returns {-2, '', 0, 0, 0} then.
--         The transition entries then carry that lineage ('lineage', claims.lua KEYS[5])
-- Returns {n, next, late_sum, late_max, pending}: orders expired now, the earliest pay_by
-- still pending (µs, '' = none), the sum and maximum of their lateness (TIME − pay_by, µs),
-- and the units still pending after this call (for the seckill_campaign_pending gauge);
-- {-1, '', 0, 0, 0} if the campaign is not in Redis or is fenced (nothing changed).

local m = redis.call('HMGET', KEYS[1], 'id', 'fenced', 'total', 'remaining', 'checked')
if not m[1] or m[2] then return {-1, '', 0, 0, 0} end
if ARGV[2] == 'cluster'
    and m[5] ~= string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') then
  return {-2, '', 0, 0, 0}
end
local function int(n) return string.format('%d', n) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', int(now), 'LIMIT', 0, tonumber(ARGV[1]))
local total, remaining = tonumber(m[3]), tonumber(m[4])
local count, back, late_sum, late_max = 0, 0, 0, 0
local users = {}
for _, id in ipairs(due) do
  local held = redis.call('HGET', KEYS[5], id)
  redis.call('ZREM', KEYS[6], id)
  if held then
    local f = {}
    for line in string.gmatch(held .. '\n', '([^\n]*)\n') do f[#f + 1] = line end
    local user, qty, at, pay_by = f[1], tonumber(f[2]), f[3], f[4]
    redis.call('HDEL', KEYS[5], id)
    redis.call('SADD', KEYS[4], id)
    count = count + 1
    back = back + qty
    remaining = math.min(remaining + qty, total)
    users[user] = (users[user] or 0) + qty
    for i = #f, 5, -1 do redis.call('LPUSH', KEYS[3], f[i]) end
    redis.call('HSET', KEYS[7], id, 'expired\n' .. int(now) .. '\n' .. held)
    local entry = {'kind', 'expired', 'resolved_at', int(now), 'order_id', id, 'user', user,
                   'qty', int(qty), 'at', at, 'pay_by', pay_by}
    if #f > 4 then
      entry[#entry + 1] = 'codes'; entry[#entry + 1] = table.concat(f, '\n', 5)
    end
    if ARGV[2] == 'cluster' then entry[#entry + 1] = 'lineage'; entry[#entry + 1] = m[5] end
    redis.call('XADD', KEYS[8], '*', unpack(entry))
    local late = now - tonumber(pay_by)
    late_sum = late_sum + late
    if late > late_max then late_max = late end
  end
end
for user, qty in pairs(users) do
  local left = tonumber(redis.call('HGET', KEYS[2], user) or '0') - qty
  if left > 0 then redis.call('HSET', KEYS[2], user, int(left)) else redis.call('HDEL', KEYS[2], user) end
end
if count > 0 then
  redis.call('HSET', KEYS[1], 'remaining', int(remaining))
  redis.call('HINCRBY', KEYS[1], 'pending', -back)
  redis.call('HINCRBY', KEYS[1], 'hver', 1)
end
local next = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
local pending = tonumber(redis.call('HGET', KEYS[1], 'pending') or '0')
return {count, next[2] or '', int(late_sum), int(late_max), pending}
