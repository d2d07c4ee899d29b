-- failwell: one shared circuit breaker's transition, atomically.
-- The same rules as Record::apply in record.rs (a property test compares
-- the two). KEYS[1]: the record (hash), KEYS[2]: failure times (list,
-- newest first). ARGV: op, now ms ('' = the server's TIME), name, channel,
-- failures, window_ms, probe_timeout_ms, open_for_ms, multiplier,
-- max_open_for_ms, a, b. Returns the snapshot as JSON and publishes it on
-- the channel when the record changed.
local h, l = KEYS[1], KEYS[2]
local op = ARGV[1]
local now = tonumber(ARGV[2])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local name, channel = ARGV[3], ARGV[4]
local limit, window, probe_timeout = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local open_for, multiplier, max_open = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])

local f = redis.call('HMGET', h, 'g', 'p', 't', 'ou', 'po', 'pu', 'pa', 'e', 'st', 'ts', 'to')
local r = {
  g = tonumber(f[1]) or 0, p = tonumber(f[2]) or 0, t = tonumber(f[3]) or 0, ou = tonumber(f[4]) or 0,
  po = f[5] or '', pu = tonumber(f[6]) or 0, pa = tonumber(f[7]) or 0, e = tonumber(f[8]) or 0,
  st = tonumber(f[9]) or 0, ts = tonumber(f[10]) or 0, to = f[11] or '',
}
if type(r.po) ~= 'string' then r.po = '' end
if type(r.to) ~= 'string' then r.to = '' end
local recent = {}
for i, t in ipairs(redis.call('LRANGE', l, 0, -1)) do recent[i] = tonumber(t) end
local before = { r.g, r.p, r.t, r.ou, r.po, r.pu, r.pa, r.e, r.st, r.ts, r.to }
if r.e == 0 and op ~= 'load' then r.e = now end
local recent_changed = false

local function open_ms(trips)
  local e = math.min(math.max(trips - 1, 0), 1000)
  local ms = math.floor(open_for * multiplier ^ e)
  if ms ~= ms or ms >= max_open then return max_open end
  return ms
end
local function open(trips)
  r.p = 1; r.g = r.g + 1; r.t = math.max(trips, 1); r.ou = now + open_ms(r.t); r.po = ''; r.st = 0
  recent = {}; recent_changed = true
end
local function lease()
  r.p = 2; r.g = r.g + 1; r.po = ARGV[11]; r.pu = now + probe_timeout; r.st = 0
end
local function reset()
  r.p = 0; r.g = r.g + 1; r.t = 0; r.po = ''; r.st = 0
  recent = {}; recent_changed = true
end
local function in_window()
  local n = 0
  for _, t in ipairs(recent) do if t > now - window then n = n + 1 end end
  return n
end

if op == 'trip' then
  if r.p == 0 and tonumber(ARGV[11]) == r.g then open(1) end
elseif op == 'failures' then
  if r.p == 0 and tonumber(ARGV[11]) == r.g then
    for _ = 1, math.min(tonumber(ARGV[12]), limit) do table.insert(recent, 1, now) end
    while #recent > limit do table.remove(recent) end
    recent_changed = true
    if in_window() >= limit then open(1) end
  end
elseif op == 'success' then
  if r.p == 0 and tonumber(ARGV[11]) == r.g and #recent > 0 then recent = {}; recent_changed = true end
elseif op == 'claim' then
  if r.p == 1 and now >= r.ou then
    lease()
  elseif r.p == 2 and now >= r.pu and r.st == 0 then
    lease()
  elseif r.p == 2 and now >= r.pu then
    open(r.t + 1)
  end
elseif op == 'probe' then
  if r.p == 2 and tonumber(ARGV[11]) == r.g then
    if ARGV[12] == 'started' then r.st = 1
    elseif ARGV[12] == 'success' then reset()
    elseif ARGV[12] == 'failure' then open(r.t + 1)
    else open(r.t); r.ou = now end
  end
elseif op == 'pause' then
  r.pa = math.max(r.pa, now + tonumber(ARGV[11]))
elseif op == 'force' then
  local code = tonumber(ARGV[11])
  if code == 0 then reset(); r.pa = 0 else r.p = code; r.g = r.g + 1; r.po = ''; r.st = 0 end
elseif op == 'throttle' then
  r.ts = r.ts + 1; r.to = ARGV[11]
end

local changed = recent_changed
local after = { r.g, r.p, r.t, r.ou, r.po, r.pu, r.pa, r.e, r.st, r.ts, r.to }
for i = 1, 11 do if before[i] ~= after[i] then changed = true end end
if changed then
  local n = function(x) return string.format('%.0f', x) end
  redis.call('HSET', h, 'g', n(r.g), 'p', n(r.p), 't', n(r.t), 'ou', n(r.ou), 'po', r.po, 'pu', n(r.pu),
    'pa', n(r.pa), 'e', n(r.e), 'st', n(r.st), 'ts', n(r.ts), 'to', r.to)
  redis.call('DEL', l)
  for _, t in ipairs(recent) do redis.call('RPUSH', l, n(t)) end
end

local phases = { [0] = 'closed', 'open', 'half_open', 'forced_open', 'forced_closed' }
local function left(u) return math.max(0, u - now) end
local snap = {
  name = name, epoch = r.e, generation = r.g, phase = phases[r.p],
  failures = (r.p == 0) and in_window() or 0,
  open_ms = (r.p == 1) and left(r.ou) or 0,
  probe_owner = (r.p == 2) and r.po or '',
  probe_ms = (r.p == 2) and left(r.pu) or 0,
  pause_ms = left(r.pa),
  throttle_seq = r.ts, throttle_owner = r.to,
}
if changed then redis.call('PUBLISH', channel, cjson.encode(snap)) end
snap.changed = changed
return cjson.encode(snap)
