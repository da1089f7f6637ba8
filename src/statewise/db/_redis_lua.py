"""The Lua scripts RedisDb runs server-side (Redis >= 7: the `#!lua` shebang makes Redis
refuse a writing script up front when it is out of memory, instead of failing half-way).

COMMIT checks every precondition before its first write, so a lost race writes nothing.
Every value it stores was encoded by the client (JSON text, exact float strings); the
script never decodes or re-encodes user JSON (cjson would turn `[]` into `{}` and round
floats to 14 digits).

KEYS of COMMIT: 1 session hash, 2 all-sessions index, 3 user index, 4 app index,
5 event data, 6 event meta, 7 runs hash, 8 run order, 9 commit ids; then 5 per scope
write: scope hash, delta segments, delta meta, snapshots, snapshot versions.
ARGV[1] is a small JSON header (see `RedisDb._commit_args`); ARGV[2..] are the blobs it
refers to by index.

Returns {1, last_seq} on success, {2, result} when this commit's id already landed (a
retry after a lost reply, even after other writers' commits; `result` as
`encode_commit_result` writes it), {0, "session", expected} or {0, "scope", i, actual}
(actual = -1 when the scope does not exist) on a lost race.
"""

from __future__ import annotations

COMMIT = r"""#!lua
local h = cjson.decode(ARGV[1])
local sess = KEYS[1]
local now = h.now
local done = redis.call('HGET', KEYS[9], h.token)
if done then return {2, done} end
local exists = redis.call('EXISTS', sess) == 1
if h.create and exists then return {0, 'session', 0} end
if (not h.create) and (not exists) then return {0, 'session', 1} end
for i, w in ipairs(h.writes) do
  local b = 9 + (i - 1) * 5
  local v = redis.call('HGET', KEYS[b + 1], 'version')
  local actual = v and tonumber(v) or 0
  if actual ~= w.base then return {0, 'scope', i, v and actual or -1} end
end
-- Every check passed: from here on, only writes.
local n = h.n_events
local last
if h.create then
  redis.call('HSET', sess, 'session_id', h.sid, 'kind', h.kind, 'created_at', now,
             'updated_at', now, 'last_seq', n, 'metadata', ARGV[h.metadata], 'runs', 0)
  if h.user_id then redis.call('HSET', sess, 'user_id', h.user_id) end
  if h.app_name then redis.call('HSET', sess, 'app_name', h.app_name) end
  last = n
else
  last = redis.call('HINCRBY', sess, 'last_seq', n)
  redis.call('HSET', sess, 'updated_at', now)
end
redis.call('ZADD', KEYS[2], h.score, h.sid)
if h.user_id then redis.call('ZADD', KEYS[3], h.score, h.sid) end
if h.app_name then redis.call('ZADD', KEYS[4], h.score, h.sid) end
for i, w in ipairs(h.writes) do
  local b = 9 + (i - 1) * 5
  local nv = w.base + 1
  redis.call('HSET', KEYS[b + 1], 'version', nv, 'updated_at', now)
  redis.call('HINCRBY', KEYS[b + 1], 'tail_bytes', w.dbytes)
  redis.call('HSET', KEYS[b + 2], nv, ARGV[w.seg])
  redis.call('HSET', KEYS[b + 3], nv, ARGV[w.meta])
  if w.snap > 0 then
    redis.call('HSET', KEYS[b + 4], nv, ARGV[w.snap])
    redis.call('ZADD', KEYS[b + 5], nv, nv)
    redis.call('HSET', KEYS[b + 1], 'snapshot_version', nv, 'snapshot_bytes', w.sbytes,
               'tail_bytes', 0)
  end
end
local versions = ''
for _, w in ipairs(h.writes) do versions = versions .. '|' .. w.kind .. '=' .. (w.base + 1) end
redis.call('HSET', KEYS[9], h.token, last .. '|' .. n .. versions)
local first = last - n + 1
for i, e in ipairs(h.events) do
  redis.call('HSET', KEYS[5], first + i - 1, ARGV[e[1]])
  redis.call('HSET', KEYS[6], first + i - 1, ARGV[e[2]])
end
local r = h.run
if r then
  local runs, id = KEYS[7], r.id
  if redis.call('HEXISTS', runs, 'status:' .. id) == 0 then
    local order = redis.call('HINCRBY', sess, 'runs', 1)
    local created = r.created_at or now
    redis.call('HSET', runs, 'created_at:' .. id, created, 'order:' .. id, order)
    if r.agent_name then redis.call('HSET', runs, 'agent_name:' .. id, r.agent_name) end
    if r.input then redis.call('HSET', runs, 'input:' .. id, r.input) end
    redis.call('ZADD', KEYS[8], created, string.format('%012d', order) .. id)
  end
  redis.call('HSET', runs, 'status:' .. id, r.status, 'updated_at:' .. id, now,
             'messages:' .. id, ARGV[r.messages], 'metrics:' .. id, ARGV[r.metrics])
  for _, f in ipairs({'content', 'error'}) do
    if r[f] then redis.call('HSET', runs, f .. ':' .. id, r[f])
    else redis.call('HDEL', runs, f .. ':' .. id) end
  end
end
return {1, last}
"""

_SCOPE_ROW = r"""
-- A scope's {version, snapshot_version, snapshot_bytes, tail_bytes, snapshot|false,
-- segments...}, or only {version} when `skip` or when it is at version `held`.
local function scope_row(scope, dseg, snap, held, skip)
  local f = redis.call('HMGET', scope, 'version', 'snapshot_version', 'snapshot_bytes',
                       'tail_bytes')
  local version = tonumber(f[1] or '0')
  if skip or version == held then return {version} end
  local sv = tonumber(f[2] or '0')
  local row = {version, sv, tonumber(f[3] or '0'), tonumber(f[4] or '0'), false}
  if sv > 0 then row[5] = redis.call('HGET', snap, sv) end
  if version > sv then
    local fields = {}
    for v = sv + 1, version do fields[#fields + 1] = v end
    local chunk = 4000
    for s = 1, #fields, chunk do
      local part = redis.call('HMGET', dseg, unpack(fields, s, math.min(s + chunk - 1, #fields)))
      for j = 1, #part do row[#row + 1] = part[j] end
    end
  end
  return row
end
"""

LOAD = (
    r"""#!lua flags=no-writes
-- KEYS: per scope 3 keys (scope hash, delta segments, snapshots).
-- Returns per scope {version, snapshot_version, snapshot_bytes, tail_bytes, snapshot|false,
-- segments...}, read atomically so snapshot and deltas agree with the version.
"""
    + _SCOPE_ROW
    + r"""
local out = {}
for i = 1, #KEYS, 3 do
  out[#out + 1] = scope_row(KEYS[i], KEYS[i + 1], KEYS[i + 2], nil, false)
end
return out
"""
)

READ = (
    r"""#!lua flags=no-writes
-- KEYS[1] the session hash, then per scope the 3 keys LOAD takes; ARGV: per scope the
-- version the reader holds (-1: none). Returns {the session's fields (HGETALL), then per
-- scope {version} when it is at the held version or there is no session, else its LOAD
-- row}, read atomically.
"""
    + _SCOPE_ROW
    + r"""
local session = redis.call('HGETALL', KEYS[1])
local out = {session}
for i = 2, #KEYS, 3 do
  local held = tonumber(ARGV[(i + 1) / 3])
  out[#out + 1] = scope_row(KEYS[i], KEYS[i + 1], KEYS[i + 2], held, #session == 0)
end
return out
"""
)


CLAIM_RUN = r"""#!lua
-- KEYS[1] the session's run leases hash; ARGV: run id, owner, seconds to live.
-- A lease is "owner|expiry"; taken when free, ours, or expired. Returns 1 or 0.
-- Expiry is by the server's clock (TIME), not the client's.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  local owner, expires = string.match(held, '^(.*)|([^|]*)$')
  if owner ~= ARGV[2] and tonumber(expires) > now then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|' .. string.format('%.6f', now + tonumber(ARGV[3])))
return 1
"""

RELEASE_RUN = r"""#!lua
-- KEYS[1] the session's run leases hash; ARGV: run id, owner.
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held and string.match(held, '^(.*)|[^|]*$') == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
"""
