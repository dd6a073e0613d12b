"""The Redis store's Lua scripts (:mod:`proxy.store.redis`): each runs atomically on the
server, so a batch is applied whole or not at all."""

# Commit one bucket's part of a Batch (redis_layout.by_bucket: every key in one slot).
# KEYS: 1 the bucket's live index, then per stream i (1-based): 3i-1 record, 3i log,
# 3i+1 wake. ARGV: now_ms, live_until_ms, max_events, wake_ttl_ms, n, n stream keys;
# then fencing (the writer's token, the writer, takeovers: count, then i fence last each;
# the token is checked against each stream's own record, so the script stays in one slot);
# then puts (count, 11 fields each: i session owner state first last rids ann exp_ms|''
# who srv), appends (count, then per run of consecutive seqs: i, n, first seq, the
# count of its marked events and k mark for each (k: 0-based in the run; an event not
# listed has mark 0), then n ids 'seq-1', then n payloads; a stream may have several
# runs, in order), trimmed
# (count, i first each), completed (count, i exp_ms each), dropped (count, i each).
# Returns the names of the keys fencing refused (nothing was applied to them).
COMMIT_LUA = """#!lua
local now, live_until = tonumber(ARGV[1]), ARGV[2]
local max_events, wake_ttl = tonumber(ARGV[3]), ARGV[4]
local nkeys = tonumber(ARGV[5])
local live = KEYS[1]
local pos = 5 + nkeys
local function take() pos = pos + 1; return ARGV[pos] end
local function name(i) return ARGV[5 + i] end
local function rec(i) return KEYS[3 * i - 1] end
local function log(i) return KEYS[3 * i] end
local function int(n) return string.format('%d', n) end

-- Each stream's record is read once (with fencing, below) and kept in `recs` as the
-- batch changes it ({state, first, last, exp} as stored; false: none). What changed is
-- written once at the end (`dirty`: one HSET per stream), with its wake-up and expiry
-- (the script is atomic: no reader sees the steps between). `indexed`: the stream was
-- LIVE when read, so the live index may hold it.
-- `woken`: the stream's tails must look again (its wake key gets an entry), unless the
-- batch added to its log (`added`: that entry wakes them, and they read the record with
-- the entries after it) or it had no record when read (`fresh`: a tail reads a record
-- before it blocks, so none waits on it).
local recs, dirty, indexed, woken, expiring, added, fresh = {}, {}, {}, {}, {}, {}, {}
local function wake(i) woken[i] = true end
local function set(i, field, value)
  local d = dirty[i]
  if not d then d = {}; dirty[i] = d end
  d[field] = value
end

local function drop(i)
  redis.call('DEL', rec(i), log(i))
  if indexed[i] then redis.call('ZREM', live, name(i)) end
  recs[i], dirty[i], expiring[i], indexed[i], added[i], fresh[i] = false, nil, nil, nil, nil, nil
end

-- Both keys of a stream expire together; a LIVE one is in the index until then. One
-- whose time has come goes at once (a later step finds no record, as it would any).
local function expire(i, state, at)
  if tonumber(at) <= now then return drop(i) end
  expiring[i] = {state, at}
end

local function settle()
  for i, d in pairs(dirty) do
    local args = {}
    for field, value in pairs(d) do
      args[#args + 1] = field
      args[#args + 1] = value
    end
    redis.call('HSET', rec(i), unpack(args))
  end
  local latest = nil
  for i, e in pairs(expiring) do
    local state, at = e[1], e[2]
    redis.call('PEXPIREAT', rec(i), at)
    redis.call('PEXPIREAT', log(i), at)
    if state == 'live' then
      redis.call('ZADD', live, at, name(i))
      if not latest or tonumber(at) > latest then latest = tonumber(at) end
    elseif indexed[i] then
      redis.call('ZREM', live, name(i))
    end
  end
  if latest and redis.call('PEXPIRETIME', live) < latest then
    redis.call('PEXPIREAT', live, latest)
  end
  for i in pairs(woken) do
    if not (added[i] or fresh[i]) then
      local w = KEYS[3 * i + 1]
      redis.call('XADD', w, 'MAXLEN', '1', '*', 'w', '1')
      redis.call('PEXPIRE', w, wake_ttl)
    end
  end
end

-- The live record, or nil when there is none (an expired one goes).
local function load(i)
  local r = recs[i]
  if not r then return nil end
  if tonumber(r.exp) <= now then drop(i); return nil end
  return r
end

-- Fencing: a key whose record holds another writer's token, or whose takeover finds
-- it not LIVE with the expected token and last seq, is refused whole (only its own keys
-- are read). A takeover passed gives the record the writer's token.
local fence, writer = take(), take()
local taking = {}
for _ = 1, tonumber(take()) do
  local i = tonumber(take())
  taking[i] = {take(), take()}
end
local refused, refused_names = {}, {}
for i = 1, nkeys do
  local r = redis.call('HMGET', rec(i), 'state', 'first', 'last', 'exp', 'fence')
  recs[i] = r[1] and {state = r[1], first = r[2], last = r[3], exp = r[4]}
  indexed[i] = r[1] == 'live'
  fresh[i] = not r[1]
  local known = r[1] and tonumber(r[4]) > now
  local t = taking[i]
  local no
  if t then
    no = not (known and r[1] == 'live' and (r[5] or '') == t[1] and r[3] == t[2])
  else
    no = known and (r[5] or '') ~= fence
  end
  if no then
    refused[i] = true
    table.insert(refused_names, name(i))
  elseif t then
    set(i, 'fence', fence)
  end
end

local function newest(l)
  local top = redis.call('XREVRANGE', l, '+', '-', 'COUNT', 1)[1]
  return top and tonumber(string.match(top[1], '^%d+')) or 0
end

-- A run of `count` consecutive events from seq `seq0`: their stream ids ('seq-1', packed
-- by the client) at ARGV[base + 1 ..], their payloads at ARGV[base + count + 1 ..],
-- `marks` the few that have one (0-based index -> mark); the loop below does one XADD
-- per event and nothing else; the run is checked against the record once, not per event.
local function append(i, base, count, seq0, marks)
  local r = load(i)
  local l = log(i)
  local top = 0
  if r then
    top = newest(l)
  else -- no record: its history was lost, keep what comes
    redis.call('DEL', l)
    r = {state = 'live', first = '1', last = '0', exp = live_until}
    recs[i] = r
    dirty[i] = {session = '', owner = writer, state = 'live', rids = '[]', ann = '0',
      fence = fence}
  end
  local last = tonumber(r.last)
  -- A log is whole or gone (Redis drops keys, not parts of them): one that ends where
  -- the record does starts at its `first`; one that does not is not this record's.
  local first = nil
  if top == last and top > 0 then
    first = tonumber(r.first)
  elseif top > 0 then
    redis.call('DEL', l)
  end
  local skip = last - seq0 + 1 -- already there (a retried batch)
  if skip < 0 then skip = 0 end
  if skip < count then
    if skip == 0 and seq0 ~= last + 1 then -- a hole: what was before it is unreachable
      redis.call('DEL', l)
      first = nil
    end
    local call = redis.call
    local ids = base + 1
    local payloads = ids + count
    for k = skip, count - 1 do
      local mark = marks[k]
      if mark then
        call('XADD', l, ARGV[ids + k], 'p', ARGV[payloads + k], 'm', mark)
      else
        call('XADD', l, ARGV[ids + k], 'p', ARGV[payloads + k])
      end
    end
    first = first or seq0 + skip
    last = seq0 + count - 1
    added[i] = true
  end
  first = first or last + 1
  if last - first + 1 > max_events then
    redis.call('XTRIM', l, 'MAXLEN', max_events)
    first = last - max_events + 1
  end
  if r.state == 'live' then r.exp = live_until end
  r.first, r.last = int(first), int(last)
  set(i, 'first', r.first)
  set(i, 'last', r.last)
  set(i, 'exp', r.exp)
  expire(i, r.state, r.exp)
end

for _ = 1, tonumber(take()) do
  local i, session, owner, state = tonumber(take()), take(), take(), take()
  local first, last, rids, ann, at, who = take(), take(), take(), take(), take(), take()
  local srv = take()
  if refused[i] then -- nothing
  elseif load(i) then -- known: positions, state, expiry and log stay
    set(i, 'session', session)
    set(i, 'owner', owner)
    set(i, 'rids', rids)
    set(i, 'ann', ann)
    set(i, 'who', who)
    set(i, 'srv', srv)
  else
    if at == '' then at = live_until end
    recs[i] = {state = state, first = first, last = last, exp = at}
    dirty[i] = {session = session, owner = owner, state = state, first = first, last = last,
      rids = rids, ann = ann, exp = at, who = who, srv = srv, fence = fence}
    expire(i, state, at)
  end
  if not refused[i] then wake(i) end
end
for _ = 1, tonumber(take()) do
  local i, count, seq0 = tonumber(take()), tonumber(take()), tonumber(take())
  local marks = {}
  for _ = 1, tonumber(take()) do
    local k = tonumber(take())
    marks[k] = take()
  end
  if not refused[i] then append(i, pos, count, seq0, marks) end
  pos = pos + 2 * count
end
for _ = 1, tonumber(take()) do
  local i, keep = tonumber(take()), tonumber(take())
  local r = recs[i]
  if r and not refused[i] then
    local first = math.max(tonumber(r.first), math.min(keep, tonumber(r.last) + 1))
    if first > tonumber(r.first) then -- the log starts at `first`: else nothing goes
      redis.call('XTRIM', log(i), 'MINID', int(first) .. '-0')
      r.first = int(first)
      set(i, 'first', r.first)
    end
    wake(i)
  end
end
for _ = 1, tonumber(take()) do
  local i, at = tonumber(take()), take()
  if not refused[i] then
    local r = load(i)
    if r then
      r.state, r.exp = 'completed', at
      set(i, 'state', 'completed')
      set(i, 'exp', at)
      expire(i, 'completed', at)
    end
    wake(i)
  end
end
for _ = 1, tonumber(take()) do
  local i = tonumber(take())
  if not refused[i] then
    drop(i)
    wake(i)
  end
end
settle()
return refused_names
"""

# The epoch, minted when missing (a new or flushed Redis); its TTL refreshed.
EPOCH_LUA = """#!lua
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[1]
  redis.call('SET', KEYS[1], epoch)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return epoch
"""

# Take or renew a lease: free, expired (gone) or already ARGV[1]'s.
ACQUIRE_LUA = """#!lua
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Extend a lease ARGV[1] holds now; 0 (nothing taken) if it lapsed or another holds it.
RENEW_LUA = """#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# A replica's inbox, the messages it was given (KEYS[1], ``<inbox>:taking``): remove
# ARGV[2] once (unless ''), keep the '.' mark at its head (so the list always exists with
# a TTL: BLMOVE keeps it), refresh the TTL (ARGV[1] ms); how many were removed, then the
# messages still there (given but not yet removed, or moved by a read whose reply was lost).
TAKEN_LUA = """#!lua
local removed = 0
if ARGV[2] ~= '' then removed = redis.call('LREM', KEYS[1], 1, ARGV[2]) end
if redis.call('LINDEX', KEYS[1], 0) ~= '.' then redis.call('LPUSH', KEYS[1], '.') end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
local left = redis.call('LRANGE', KEYS[1], 1, -1)
table.insert(left, 1, removed)
return left
"""

RELEASE_LUA = """#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""

# Write a task record (ARGV[1], JSON {"record": …, "expires_at": …}) until ARGV[2] (unix
# ms) unless the one held is final (its record's status one of ARGV[3..]): 1 written, 0 not.
PUT_TASK_LUA = """#!lua
local held = redis.call('GET', KEYS[1])
if held then
  local ok, value = pcall(cjson.decode, held)
  if ok and type(value) == 'table' and type(value.record) == 'table' then
    for i = 3, #ARGV do
      if value.record.status == ARGV[i] then return 0 end
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
return 1
"""
