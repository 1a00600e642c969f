-- room.lua: one step of a campaign's waiting room (src/room/redis.rs): a join or a status
-- read, decided atomically on the Redis server's clock, in the campaign's slot. The arithmetic
-- is src/room/schedule.rs's: admissions `spacing` µs apart; the pre-queue (joins before
-- starts) frozen at the first step on or after starts and ranked by score; a later joiner
-- slotted one spacing after the last slot given, or at once when the line is empty.
--
-- KEYS[1] {c:<id>}:meta       hash   the campaign (install.lua): status, remaining, starts, ends
-- KEYS[2] {c:<id>}:room:pre   zset   pre-queue: user by shuffle score (or join number)
-- KEYS[3] {c:<id>}:room:late  zset   later joiners: user by slot (µs)
-- KEYS[4] {c:<id>}:room       hash   q (size of the frozen pre-queue), tail (last slot given),
--                                    seq (join numbers of an unshuffled pre-queue), and with
--                                    --redis-wait-replicas: fq (the q replicas are known to
--                                    have), ft (the latest later joiner's slot they have), fp
--                                    (a pre-queue size they have)
-- ARGV[1] 'join' | 'status' | 'stats' | 'mark'
-- ARGV[2] user id
-- ARGV[3] spacing in µs ('mark': the slot confirmed, or '')
-- ARGV[4] shuffle score (decimal, < 2^48) or '' to queue the pre-queue in join order
--         ('mark': the q confirmed, or '')
-- ARGV[5] ('mark' only) the pre-queue size confirmed, or ''
--
-- Returns {'line', admit_at, ahead, now, q, slot} | {'prequeue', n} | {'sold_out'} |
-- {'unknown'} (status of a user who never joined) | {'missing'} (no such campaign in the
-- gate); q, slot and n are what a replica must have before the answer is told
-- (src/room/redis.rs), '' when a replica is known to have it: q for the pre-queue's freeze,
-- slot for a later joiner's place, n for a pre-queue of n (pre-queue joins only add, so a
-- replica with n members has the first n joined). 'stats' returns {'stats', joined,
-- admitted, tail or '', now}; 'mark' records, after a WAIT, that replicas have the freeze of
-- size ARGV[4], the place of ARGV[2] at slot ARGV[3] and a pre-queue of ARGV[5] — only if
-- this server holds them (after a failover it may not), and returns {'marked'}.

if ARGV[1] == 'mark' then
  local q, a, n = ARGV[4], ARGV[3], ARGV[5]
  local function raise(field, v)
    local was = redis.call('HGET', KEYS[4], field)
    if not was or tonumber(was) < tonumber(v) then redis.call('HSET', KEYS[4], field, v) end
  end
  if q ~= '' and redis.call('HGET', KEYS[4], 'q') == q then
    redis.call('HSET', KEYS[4], 'fq', q)
  end
  if a ~= '' and redis.call('ZSCORE', KEYS[3], ARGV[2]) == a then raise('ft', a) end
  if n ~= '' and redis.call('ZSCORE', KEYS[2], ARGV[2])
    and redis.call('ZCARD', KEYS[2]) >= tonumber(n) then
    raise('fp', n)
  end
  return {'marked'}
end

local m = redis.call('HMGET', KEYS[1], 'status', 'remaining', 'starts', 'ends')
if not m[1] then return {'missing'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local user, sp = ARGV[2], tonumber(ARGV[3])
local function int(n) return string.format('%d', n) end
local starts = nil
if m[3] and m[3] ~= '' then starts = tonumber(m[3]) end
local sold = m[1] == 'closed' or tonumber(m[2]) == 0
  or (m[4] and m[4] ~= '' and now >= tonumber(m[4]))

local function frozen()
  local q = redis.call('HGET', KEYS[4], 'q')
  if q then return tonumber(q) end
  return nil
end
local function started() return frozen() ~= nil or starts == nil or now >= starts end
local function freeze()
  local q = frozen()
  if q then return q end
  q = redis.call('ZCARD', KEYS[2])
  redis.call('HSET', KEYS[4], 'q', q)
  if q > 0 then redis.call('HSET', KEYS[4], 'tail', int(starts + (q - 1) * sp)) end
  return q
end
local function admitted_pre(q)
  if starts == nil or now < starts then return 0 end
  return math.min(q, math.floor((now - starts) / sp) + 1)
end

-- What a replica must have before a place resting on the freeze of q (and, for a later
-- joiner, on its slot s) is told: a slot up to the latest one confirmed was given before it.
local function unconfirmed(q, s)
  local fq, sq = redis.call('HGET', KEYS[4], 'fq'), int(q)
  if fq == sq then sq = '' end
  if not s then return sq, '' end
  local ft = redis.call('HGET', KEYS[4], 'ft')
  if ft and tonumber(ft) >= tonumber(s) then return sq, '' end
  return sq, s
end
local function line(a, ahead, q, s)
  local uq, us = unconfirmed(q, s)
  return {'line', int(a), ahead, int(now), uq, us}
end
local function prequeue()
  local n, fp = redis.call('ZCARD', KEYS[2]), redis.call('HGET', KEYS[4], 'fp')
  if fp and tonumber(fp) >= n then return {'prequeue', ''} end
  return {'prequeue', int(n)}
end

local function place()
  local s = redis.call('ZSCORE', KEYS[3], user)
  if s then
    local a = tonumber(s)
    if a <= now then return line(a, 0, freeze(), s) end
    if sold then return {'sold_out'} end
    local q = freeze()
    local ahead = (q - admitted_pre(q))
      + redis.call('ZCOUNT', KEYS[3], '(' .. int(now), '(' .. int(a))
    return line(a, ahead, q, s)
  end
  local r = redis.call('ZRANK', KEYS[2], user)
  if not r then return nil end
  if not started() then return prequeue() end
  local q = freeze()
  local rank = r + 1
  local a = starts + (rank - 1) * sp
  local adm = admitted_pre(q)
  if rank <= adm then return line(a, 0, q, nil) end
  if sold then return {'sold_out'} end
  return line(a, rank - 1 - adm, q, nil)
end

if ARGV[1] == 'stats' then
  local joined = redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
  local admitted = 0
  if started() then
    local q = freeze()
    admitted = admitted_pre(q) + redis.call('ZCOUNT', KEYS[3], '-inf', int(now))
  end
  return {'stats', joined, admitted, redis.call('HGET', KEYS[4], 'tail') or '', int(now)}
end

local p = place()
if p then return p end
if ARGV[1] ~= 'join' then return {'unknown'} end
if sold then return {'sold_out'} end
if not started() then
  local score = ARGV[4]
  if score == '' then score = redis.call('HINCRBY', KEYS[4], 'seq', 1) end
  redis.call('ZADD', KEYS[2], score, user)
  return prequeue()
end
freeze()
local tail = redis.call('HGET', KEYS[4], 'tail')
local a = now
if tail then a = math.max(now, tonumber(tail) + sp) end
redis.call('HSET', KEYS[4], 'tail', int(a))
redis.call('ZADD', KEYS[3], int(a), user)
return place()
