-- claim.lua: the atomic step of one claim, line for line the rules of CampaignState::decide
-- (src/engine/state.rs): status -> window -> allowance -> stock -> take. A won claim takes the
-- units, records the user's holding, pops its codes, numbers the order and appends it to the
-- campaign's stream in this one script, so a reservation never exists without its order.
--
-- KEYS[1] {c:<id>}:meta    hash   id, kind, total, remaining, limit, status, starts, ends,
--                                 hver (holders version: bumped by every script that changes users),
--                                 fenced (set while the gate is being rebuilt: fence.lua),
--                                 hold (seconds of a campaign with holds), pending (their units)
-- KEYS[2] {c:<id>}:users   hash   user -> units held
-- KEYS[3] {c:<id>}:codes   list   code pool, handed out from the head
-- KEYS[4] {c:<id>}:seq     string last order number
-- KEYS[5] {c:<id>}:orders  stream one entry per won claim (order_id, user, qty, at, codes,
--                                 and pay_by for a campaign with holds)
-- KEYS[6] {c:<id>}:held    hash   order_id -> pending order (user, qty, at, pay_by, codes; lines)
-- KEYS[7] {c:<id>}:deadlines zset order_id by pay_by (µs)
-- KEYS[8] {c:<id>}:idem:…  string optional: the stored answer of (user, Idempotency-Key)
-- KEYS[9] {c:<id>}:idemrej: prefix, with KEYS[8]: hashes `<prefix><bucket>` counting the
--         rejection answers kept in each time bucket of ARGV[4] seconds (field '' = all users,
--         field <user> = that user); a key set in bucket b has expired by the end of b + 1,
--         so buckets b and b - 1 together count at least every rejection answer still kept
-- ARGV[1] user id
-- ARGV[2] qty (1 … 10^6, validated by the caller)
-- ARGV[3] retention in seconds of a won answer
-- ARGV[4] retention in seconds of a rejection answer (the claim changed nothing)
-- ARGV[5] most rejection answers kept per user (in this campaign)
-- ARGV[6] most rejection answers kept per campaign
--
-- A rejection beyond either cap is answered but not kept (see src/engine/idempotency.rs).
-- Returns {tag, answer}: tag 'new' (processed now), 'replay' (answer stored under the key),
-- 'missing' (no such campaign in Redis) or 'fenced' (refused, nothing changed: fence.lua). answer is the claim answer as lines:
-- outcome, order_id, qty, remaining, held, then one line per code ('' = field absent). A won
-- order of a campaign with holds is pending: its outcome line is 'won:<pay_by µs>', and it is
-- recorded in KEYS[6] and KEYS[7] (and meta 'pending') until confirm/expire/cancel_hold.lua.
-- The window is judged by this Redis server's clock (TIME), one clock for every instance.

local idem = KEYS[8]
if idem then
  local stored = redis.call('GET', idem)
  if stored then return {'replay', stored} end
end

local m = redis.call('HMGET', KEYS[1], 'status', 'starts', 'ends', 'limit', 'remaining', 'kind', 'id',
                    'fenced', 'hold')
local status = m[1]
if not status then return {'missing', ''} end
if m[8] then return {'fenced', ''} end

local function int(n) return string.format('%d', n) end
local function answer(outcome, order_id, qty, remaining, held, codes)
  local lines = {outcome, order_id or '', qty and int(qty) or '',
                 remaining and int(remaining) or '', held and int(held) or ''}
  if codes then
    for i = 1, #codes do lines[#lines + 1] = codes[i] end
  end
  return table.concat(lines, '\n')
end
local function keep_rejection(encoded)
  local ttl = tonumber(ARGV[4])
  local bucket = math.floor(tonumber(redis.call('TIME')[1]) / ttl)
  local cur = KEYS[9] .. string.format('%d', bucket)
  local prev = KEYS[9] .. string.format('%d', bucket - 1)
  local c = redis.call('HMGET', cur, '', ARGV[1])
  local p = redis.call('HMGET', prev, '', ARGV[1])
  local all = tonumber(c[1] or '0') + tonumber(p[1] or '0')
  local mine = tonumber(c[2] or '0') + tonumber(p[2] or '0')
  if all >= tonumber(ARGV[6]) or mine >= tonumber(ARGV[5]) then return end
  redis.call('SET', idem, encoded, 'EX', ttl)
  redis.call('HINCRBY', cur, '', 1)
  redis.call('HINCRBY', cur, ARGV[1], 1)
  redis.call('EXPIRE', cur, 2 * ttl)
end
local function finish(encoded, won)
  if idem then
    if won then
      redis.call('SET', idem, encoded, 'EX', ARGV[3])
    else
      keep_rejection(encoded)
    end
  end
  return {'new', encoded}
end

if status == 'paused' or status == 'closed' then return finish(answer(status)) end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if m[2] ~= '' and now < tonumber(m[2]) then return finish(answer('not_started')) end
if m[3] ~= '' and now >= tonumber(m[3]) then return finish(answer('ended')) end

local user = ARGV[1]
local qty = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[2], user) or '0')
local limit = tonumber(m[4])
if held >= limit then return finish(answer('already_claimed', nil, nil, nil, held)) end
if held + qty > limit then return finish(answer('over_limit', nil, nil, nil, held)) end
local remaining = tonumber(m[5])
if remaining < qty then return finish(answer('sold_out', nil, nil, remaining)) end

redis.call('HSET', KEYS[1], 'remaining', int(remaining - qty))
redis.call('HSET', KEYS[2], user, int(held + qty))
redis.call('HINCRBY', KEYS[1], 'hver', 1)
local codes = nil
if m[6] == 'codes' then codes = redis.call('LPOP', KEYS[3], qty) end
local seq = redis.call('INCR', KEYS[4])
local order_id = m[7] .. '-' .. int(seq)
local entry = {'order_id', order_id, 'user', user, 'qty', int(qty), 'at', int(now)}
if codes then
  entry[#entry + 1] = 'codes'; entry[#entry + 1] = table.concat(codes, '\n')
end
local outcome = 'won'
if m[9] then
  local pay_by = int(now + tonumber(m[9]) * 1000000)
  local lines = {user, int(qty), int(now), pay_by}
  if codes then
    for i = 1, #codes do lines[#lines + 1] = codes[i] end
  end
  redis.call('HSET', KEYS[6], order_id, table.concat(lines, '\n'))
  redis.call('ZADD', KEYS[7], pay_by, order_id)
  redis.call('HINCRBY', KEYS[1], 'pending', qty)
  entry[#entry + 1] = 'pay_by'; entry[#entry + 1] = pay_by
  outcome = 'won:' .. pay_by
end
redis.call('XADD', KEYS[5], '*', unpack(entry))
return finish(answer(outcome, order_id, qty, nil, nil, codes), true)
