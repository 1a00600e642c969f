-- claims.lua: a batch of claims on one campaign decided in one atomic step, in arrival order,
-- each exactly as claim.lua decides one (status -> window -> allowance -> stock -> take; the
-- same outcomes, codes, per-user limits and idempotency records), and the batch's won orders
-- appended to the campaign's stream in this same step, as ONE entry. What a batch saves is the
-- cost Redis pays per call (reading the request, looking the script up, writing the reply), the
-- per-claim reads and writes of the campaign's shared fields, and the stream's cost per entry
-- (XADD here, then the pipeline's XREADGROUP reply and acknowledgement, each paid per entry, not
-- per order): the campaign is read once, the holdings of the batch's users in one HMGET, and
-- remaining, hver, seq, the holdings and the orders' entry are written once at the end.
-- Deferring those writes is safe: Redis checks maxmemory only before a script's first write,
-- and every won claim writes (its idempotency answer, codes, hold or, at the latest, the
-- entry), so once one write went through every later write of the batch succeeds too.
--
-- KEYS[1] {c:<id>}:meta    hash   id, kind, total, remaining, limit, status, starts, ends,
--                                 hver (holders version), fenced (fence.lua), hold, pending,
--                                 checked (lineage.lua)
-- KEYS[2] {c:<id>}:users   hash   user -> units held
-- KEYS[3] {c:<id>}:codes   list   code pool, handed out from the head
-- KEYS[4] {c:<id>}:seq     string last order number
-- KEYS[5] {c:<id>}:orders  stream one entry per batch with a won claim: at (µs), pay_by (µs,
--                                 with holds) and orders, one line per won order in arrival
--                                 order: order_id, user, qty and its codes, tab-separated (user
--                                 ids and codes hold no control characters); on a Redis
--                                 Cluster also lineage, the node lineage the campaign was
--                                 checked on (ARGV[5]): the ledger refuses an entry of a
--                                 lineage the campaign has left, above the stream id it left at
--                                 (ledger/postgres/lineage.rs)
-- KEYS[6] {c:<id>}:held    hash   pending orders of a campaign with holds (as in claim.lua)
-- KEYS[7] {c:<id>}:deadlines zset order_id by pay_by (µs)
-- KEYS[8] {c:<id>}:idemrej: prefix of the hashes counting kept rejection answers per time
--         bucket of ARGV[2] seconds (as in claim.lua)
-- KEYS[9] {c:<id>}:packed  string orders in the stream beyond one per entry (+ wins - 1 here;
--                                 ack.lua takes them off): the pipeline lag is XLEN + this
-- KEYS[10…] {c:<id>}:idem:… the stored answers of the batch's claims that carry an
--         Idempotency-Key, referenced by index from the claims below
-- ARGV[1] retention in seconds of a won answer
-- ARGV[2] retention in seconds of a rejection answer
-- ARGV[3] most rejection answers kept per user (in this campaign)
-- ARGV[4] most rejection answers kept per campaign
-- ARGV[5] replicas that must be connected and in sync for the batch to run ('0' = no check;
--         `--redis-wait-replicas`): with fewer, nothing is decided and nothing written, so a
--         batch whose WAIT could not succeed never takes stock it cannot answer for. Behind
--         Sentinel: the count followed by the replicas that may count, as ' host:port' each
--         (the ones Sentinel would promote first), or 4294967295 while no wait can count
--         (promotable.rs). On a Redis Cluster: 'cluster', and then the batch runs only if the
--         campaign was checked against the ledger on the replication lineage of the node
--         serving it now (its 'checked' field equals this node's master_replid, lineage.lua):
--         a replica promoted after missing writes gets a new lineage, so nothing is decided on
--         it before the check
-- ARGV[6…] three per claim, in arrival order: user id, qty (1 … 10^6 in canonical decimal,
--         validated by the caller), index in KEYS of its Idempotency-Key answer ('0' = no key)
--
-- Returns one item per claim, in order: its answer in claim.lua's line format (new or replayed
-- alike: the caller treats both the same), or 'missing' / 'fenced' / 'replicas' / 'unchecked'
-- (no answer: the campaign is gone / fenced / too few replicas are in sync / not checked on
-- this node's lineage), which no answer can be, since
-- every answer starts with an outcome's name.

local function int(n) return string.format('%d', n) end
local function answer(outcome, order_id, qty, remaining, held, codes)
  local lines = {outcome, order_id or '', qty and int(qty) or '',
                 remaining and int(remaining) or '', held and int(held) or ''}
  if codes then
    for i = 1, #codes do lines[#lines + 1] = codes[i] end
  end
  return table.concat(lines, '\n')
end

local m = redis.call('HMGET', KEYS[1], 'status', 'starts', 'ends', 'limit', 'remaining', 'kind',
                    'id', 'fenced', 'hold', 'checked')
local status = m[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local secs = tonumber(t[1])

-- What every claim of the batch is answered when the campaign refuses them all alike.
local shared = nil
if status == 'paused' or status == 'closed' then shared = answer(status)
elseif status and m[2] ~= '' and now < tonumber(m[2]) then shared = answer('not_started')
elseif status and m[3] ~= '' and now >= tonumber(m[3]) then shared = answer('ended') end

-- A replica counts when it is online and acknowledged the primary within the last 2 s (it
-- sends an acknowledgement every second): one that stopped answering is not waited for.
-- Redis at times reports a lag of -1 for a replica that acknowledged a moment ago (it
-- subtracts two clock readings taken differently): that one is in sync; read as "no lag
-- field", it refused about 1% of claim batches under load (docs/BENCHMARKS.md). A lag below
-- -1 means the primary's clock was stepped back since the last acknowledgement, which says
-- nothing of the replica (one silent for minutes shows a large negative lag): not in sync.
-- (Delimited so the test scale_out::replica_lag::a_replica_acknowledging_this_second_counts
-- runs these very lines.)
-- in_sync begin
local function in_sync(spec, info)
  local need = tonumber(string.match(spec, '^%d+'))
  local among = nil
  for a in string.gmatch(spec, ' (%S+)') do
    among = among or {}
    among[a] = true
  end
  local ok = 0
  for ip, port, state, lag in string.gmatch(info,
      'slave%d+:ip=([^,\r\n]+),port=(%d+),state=([%a_]+),[^\r\n]-lag=(%-?%d+)') do
    lag = tonumber(lag)
    if state == 'online' and lag >= -1 and lag <= 2 and (not among or among[ip .. ':' .. port]) then
      ok = ok + 1
    end
  end
  return ok >= need
end
-- in_sync end

local replicas_short = false
local unchecked = false
if ARGV[5] == 'cluster' then
  local lineage = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  unchecked = status and m[10] ~= lineage
elseif tonumber(string.match(ARGV[5], '^%d+')) > 0 then
  replicas_short = not in_sync(ARGV[5], redis.call('INFO', 'replication'))
end

local n = (#ARGV - 5) / 3
local held = {}
if status and not m[8] and not shared and not replicas_short and not unchecked and n > 0 then
  local users = {}
  for i = 1, n do users[i] = ARGV[3 + 3 * i] end
  local h = redis.call('HMGET', KEYS[2], unpack(users))
  -- tonumber is a strtod; a user with no holding yet (nearly every one in a storm) skips it.
  for i = 1, n do
    local v = h[i]
    held[users[i]] = v and tonumber(v) or 0
  end
end

local limit = tonumber(m[4])
local remaining = tonumber(m[5])
local seq = nil
local wins = 0
local pending = 0
local winners = {} -- the user of each win, in order (a user may repeat)
local records = {}
local pay_by = nil
if m[9] then pay_by = int(now + tonumber(m[9]) * 1000000) end

local function keep_rejection(idem, user, encoded)
  local ttl = tonumber(ARGV[2])
  local bucket = math.floor(secs / ttl)
  local cur = KEYS[8] .. string.format('%d', bucket)
  local prev = KEYS[8] .. string.format('%d', bucket - 1)
  local c = redis.call('HMGET', cur, '', user)
  local p = redis.call('HMGET', prev, '', user)
  local all = tonumber(c[1] or '0') + tonumber(p[1] or '0')
  local mine = tonumber(c[2] or '0') + tonumber(p[2] or '0')
  if all >= tonumber(ARGV[4]) or mine >= tonumber(ARGV[3]) then return end
  redis.call('SET', idem, encoded, 'EX', ttl)
  redis.call('HINCRBY', cur, '', 1)
  redis.call('HINCRBY', cur, user, 1)
  redis.call('EXPIRE', cur, 2 * ttl)
end

-- qtys is the claim's qty as the caller sent it (canonical decimal), reused instead of
-- formatted again: string.format is among the dearest steps of a won claim in this loop.
local function decide(user, qty, qtys)
  if shared then return shared, false end
  local mine = held[user]
  if mine >= limit then return answer('already_claimed', nil, nil, nil, mine), false end
  if mine + qty > limit then return answer('over_limit', nil, nil, nil, mine), false end
  if remaining < qty then return answer('sold_out', nil, nil, remaining), false end
  remaining = remaining - qty
  held[user] = mine + qty
  wins = wins + 1
  winners[wins] = user
  local codes = nil
  if m[6] == 'codes' then codes = redis.call('LPOP', KEYS[3], qty) end
  if not seq then seq = tonumber(redis.call('GET', KEYS[4]) or '0') end
  seq = seq + 1
  local order_id = m[7] .. '-' .. int(seq)
  if codes then
    records[wins] = order_id .. '\t' .. user .. '\t' .. qtys .. '\t' .. table.concat(codes, '\t')
  else
    records[wins] = order_id .. '\t' .. user .. '\t' .. qtys
  end
  local outcome = 'won'
  if pay_by then
    local lines = {user, qtys, int(now), pay_by}
    if codes then
      for j = 1, #codes do lines[#lines + 1] = codes[j] end
    end
    redis.call('HSET', KEYS[6], order_id, table.concat(lines, '\n'))
    redis.call('ZADD', KEYS[7], pay_by, order_id)
    pending = pending + qty
    outcome = 'won:' .. pay_by
  end
  if codes then return answer(outcome, order_id, qty, nil, nil, codes), true end
  -- answer(outcome, order_id, qty) without its table: outcome, id, qty, no remaining, no held
  return outcome .. '\n' .. order_id .. '\n' .. qtys .. '\n\n', true
end

local out = {}
for i = 0, n - 1 do
  local user, qtys, k = ARGV[6 + 3 * i], ARGV[7 + 3 * i], ARGV[8 + 3 * i]
  local qty = 1
  if qtys ~= '1' then qty = tonumber(qtys) end
  local idem = nil
  if k ~= '0' then idem = KEYS[tonumber(k)] end
  local stored = idem and redis.call('GET', idem)
  if stored then
    out[i + 1] = stored
  elseif not status then
    out[i + 1] = 'missing'
  elseif m[8] then
    out[i + 1] = 'fenced'
  elseif replicas_short then
    out[i + 1] = 'replicas'
  elseif unchecked then
    out[i + 1] = 'unchecked'
  else
    local encoded, won = decide(user, qty, qtys)
    if idem then
      if won then
        redis.call('SET', idem, encoded, 'EX', ARGV[1])
      else
        keep_rejection(idem, user, encoded)
      end
    end
    out[i + 1] = encoded
  end
end

if wins > 0 then
  local entry = {'at', int(now)}
  if pay_by then entry[3] = 'pay_by'; entry[4] = pay_by end
  entry[#entry + 1] = 'orders'; entry[#entry + 1] = table.concat(records, '\n')
  if ARGV[5] == 'cluster' then entry[#entry + 1] = 'lineage'; entry[#entry + 1] = m[10] end
  redis.call('XADD', KEYS[5], '*', unpack(entry))
  if wins > 1 then redis.call('INCRBY', KEYS[9], wins - 1) end
  -- Each winner's final holding (a user who won twice is written twice, with the same value).
  local fields = {}
  local text = {} -- held amounts repeat (most users hold 1): format each amount once
  for i = 1, wins do
    local user = winners[i]
    local h = held[user]
    local s = text[h]
    if not s then s = int(h); text[h] = s end
    fields[2 * i - 1] = user; fields[2 * i] = s
  end
  redis.call('HSET', KEYS[2], unpack(fields))
  redis.call('HSET', KEYS[1], 'remaining', int(remaining))
  redis.call('HINCRBY', KEYS[1], 'hver', wins)
  redis.call('SET', KEYS[4], int(seq))
  if pending > 0 then redis.call('HINCRBY', KEYS[1], 'pending', pending) end
end
return out
