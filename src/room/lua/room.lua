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
--                                    seq (join numbers of an unshuffled pre-queue)
-- ARGV[1] 'join' | 'status' | 'stats'
-- ARGV[2] user id
-- ARGV[3] spacing in µs
-- ARGV[4] shuffle score (decimal, < 2^48) or '' to queue the pre-queue in join order
--
-- Returns {'line', admit_at, ahead, now} | {'prequeue'} | {'sold_out'} | {'unknown'} (status
-- of a user who never joined) | {'missing'} (no such campaign in the gate); 'stats' returns
-- {'stats', joined, admitted, tail or '', now}.

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

local function place()
  local s = redis.call('ZSCORE', KEYS[3], user)
  if s then
    local a = tonumber(s)
    if a <= now then return {'line', int(a), 0, int(now)} end
    if sold then return {'sold_out'} end
    local q = freeze()
    local ahead = (q - admitted_pre(q))
      + redis.call('ZCOUNT', KEYS[3], '(' .. int(now), '(' .. int(a))
    return {'line', int(a), ahead, int(now)}
  end
  local r = redis.call('ZRANK', KEYS[2], user)
  if not r then return nil end
  if not started() then return {'prequeue'} end
  local q = freeze()
  local rank = r + 1
  local a = starts + (rank - 1) * sp
  local adm = admitted_pre(q)
  if rank <= adm then return {'line', int(a), 0, int(now)} end
  if sold then return {'sold_out'} end
  return {'line', int(a), rank - 1 - adm, int(now)}
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
  return {'prequeue'}
end
freeze()
local tail = redis.call('HGET', KEYS[4], 'tail')
local a = now
if tail then a = math.max(now, tonumber(tail) + sp) end
redis.call('HSET', KEYS[4], 'tail', int(a))
redis.call('ZADD', KEYS[3], int(a), user)
return place()
