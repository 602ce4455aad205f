"""The Lua scripts of the Redis lexical index (:mod:`tmy.store.redis.postings` names the keys).

Each write script checks its operation record first and sets it last (a copy
redis-py resends applies nothing); the search script follows
:func:`tmy.store.textindex.plan` step for step. Term keys are built inside the
scripts from the head passed in ARGV; they share the namespace's hash tag, so
every key a script touches is in the slot of its declared keys. The search
intersects two over-budget terms with ``ZINTERSTORE`` into a scratch key of the
namespace (the term key head and a newline: no term holds one), deleted in the same
script.
"""

from __future__ import annotations

# KEYS: meta, docs, lengths, order, record. ARGV: record PX, term key head, then per
# document: id, length, order, term counts (JSON). Returns 1 (recorded).
_DROP = """
local function drop(doc)
  local old = redis.call('HGET', KEYS[2], doc)
  if not old then return 0 end
  for t, _ in pairs(cjson.decode(old)) do redis.call('ZREM', ARGV[2] .. t, doc) end
  local len = tonumber(redis.call('HGET', KEYS[3], doc) or '0')
  redis.call('HDEL', KEYS[2], doc)
  redis.call('HDEL', KEYS[3], doc)
  redis.call('ZREM', KEYS[4], doc)
  redis.call('HINCRBY', KEYS[1], 'n', -1)
  redis.call('HINCRBY', KEYS[1], 'total', -len)
  return 1
end
local done = redis.call('GET', KEYS[5])
if done then return tonumber(done) end
"""
PUT = (
    _DROP
    + """
for i = 3, #ARGV, 4 do
  local doc, len = ARGV[i], tonumber(ARGV[i + 1])
  drop(doc)
  local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  for t, c in pairs(cjson.decode(ARGV[i + 3])) do
    redis.call('ZADD', ARGV[2] .. t, seq * 1024 + c, doc)
  end
  redis.call('HSET', KEYS[2], doc, ARGV[i + 3])
  redis.call('HSET', KEYS[3], doc, len)
  redis.call('ZADD', KEYS[4], ARGV[i + 2], doc)
  redis.call('HINCRBY', KEYS[1], 'n', 1)
  redis.call('HINCRBY', KEYS[1], 'total', len)
end
redis.call('SET', KEYS[5], 1, 'PX', ARGV[1])
return 1
"""
)
# The same KEYS; ARGV: record PX, term key head, the ids. Returns how many were there.
REMOVE = (
    _DROP
    + """
local gone = 0
for i = 3, #ARGV do gone = gone + drop(ARGV[i]) end
redis.call('SET', KEYS[5], gone, 'PX', ARGV[1])
return gone
"""
)
# KEYS: order, record. ARGV: record PX, then id, order pairs (only existing ids change).
ORDER = """
if redis.call('GET', KEYS[2]) then return 1 end
for i = 2, #ARGV, 2 do redis.call('ZADD', KEYS[1], 'XX', ARGV[i + 1], ARGV[i]) end
redis.call('SET', KEYS[2], 1, 'PX', ARGV[1])
return 1
"""
# KEYS: meta, docs, lengths, order. ARGV: term key head. Deletes everything (idempotent).
DROP_ALL = """
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
local seen = {}
local all = redis.call('HGETALL', KEYS[2])
for i = 2, #all, 2 do
  for t, _ in pairs(cjson.decode(all[i])) do
    if not seen[t] then seen[t] = true; redis.call('DEL', ARGV[1] .. t) end
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return n
"""
# ZMSCORE / HMGET of a list in chunks: unpack() of a long list fails ("too many results to
# unpack", past ~8,000 elements in Redis's Lua)
_MANY = """
local function many(cmd, key, list)
  if #list <= 4000 then return redis.call(cmd, key, unpack(list)) end
  local out = {}
  for s = 1, #list, 4000 do
    local part = redis.call(cmd, key, unpack(list, s, math.min(s + 3999, #list)))
    for p = 1, #part do out[s + p - 1] = part[p] end
  end
  return out
end
"""
# KEYS: meta, lengths of each namespace searched (a pair each). ARGV: budget, scan, the
# number of namespaces, their term key heads, then the terms. Returns, per namespace,
# {n, total, {df…}, cut (0/1), {doc…}, {length…}, {per term: {doc position, count, …}}}
# — see textindex.plan. Numbers, not text: the reply is built without one string
# concatenation (a candidate's "i:count" strings were most of the script's time).
SEARCH = (
    _MANY
    + """
local budget, scan, spaces = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local terms = {}
for a = 4 + spaces, #ARGV do terms[#terms + 1] = ARGV[a] end
local function search(meta_key, lengths_key, head)
  local meta = redis.call('HMGET', meta_key, 'n', 'total')
  local df, idx, found, docs, cols = {}, {}, {}, {}, {}
  for i = 1, #terms do cols[i] = {} end
  if tonumber(meta[1] or '0') == 0 then  -- an empty namespace: no term lookup
    for i = 1, #terms do df[i] = 0 end
    return {'0', meta[2] or '0', df, 0, docs, {}, cols}
  end
  for i = 1, #terms do
    df[i] = redis.call('ZCARD', head .. terms[i])
    if df[i] > 0 then idx[#idx + 1] = i end
  end
  table.sort(idx, function(a, b)
    if df[a] ~= df[b] then return df[a] < df[b] end
    return terms[a] < terms[b]
  end)
  local function add(doc, i, score)
    local p = found[doc]
    if not p then p = #docs + 1; docs[p] = doc; found[doc] = p end
    local col = cols[i]
    col[#col + 1] = p
    col[#col + 1] = tonumber(score) % 1024
  end
  local spent, cut, probe, k = 0, 0, {}, 1
  while k <= #idx do
    local i = idx[k]
    if spent == 0 and cut == 0 and df[i] > budget then
      spent = budget
      if k < #idx then
        local j = idx[k + 1]
        k = k + 1
        cut = 2
        local tmp = head .. '\\n'
        redis.call('ZINTERSTORE', tmp, 2, head .. terms[i], head .. terms[j], 'WEIGHTS', 1, 0)
        local page = redis.call('ZREVRANGE', tmp, 0, budget - 1, 'WITHSCORES')
        redis.call('DEL', tmp)
        if #page > 0 then
          local members = {}
          for p = 1, #page, 2 do members[#members + 1] = page[p] end
          local other = many('ZMSCORE', head .. terms[j], members)
          for p = 1, #members do
            add(members[p], i, page[2 * p])
            add(members[p], j, other[p])
          end
        end
      else
        cut = 1
        local page = redis.call('ZREVRANGE', head .. terms[i], 0, budget - 1, 'WITHSCORES')
        for p = 1, #page, 2 do add(page[p], i, page[p + 1]) end
      end
    elseif cut == 0 and spent + df[i] <= budget and (spent == 0 or df[i] * 8 <= budget) then
      spent = spent + df[i]
      local page = redis.call('ZRANGE', head .. terms[i], 0, -1, 'WITHSCORES')
      for p = 1, #page, 2 do add(page[p], i, page[p + 1]) end
    else
      probe[#probe + 1] = i
    end
    k = k + 1
  end
  local lens = {}
  if #docs > 0 then
    for _, i in ipairs(probe) do  -- the candidates' positions are known: no add() per score
      local scores = many('ZMSCORE', head .. terms[i], docs)
      local col, c = cols[i], #cols[i]
      for p = 1, #docs do
        local score = scores[p]
        if score then
          col[c + 1], col[c + 2] = p, tonumber(score) % 1024
          c = c + 2
        end
      end
    end
    lens = many('HMGET', lengths_key, docs)
  end
  return {meta[1] or '0', meta[2] or '0', df, cut, docs, lens, cols}
end
local out = {}
for s = 1, spaces do out[s] = search(KEYS[2 * s - 1], KEYS[2 * s], ARGV[3 + s]) end
return out
"""
)
# KEYS: meta. ARGV: term key head, the terms. Returns {n, total, df…}.
STATS = """
local meta = redis.call('HMGET', KEYS[1], 'n', 'total')
local out = {meta[1] or '0', meta[2] or '0'}
for a = 2, #ARGV do out[#out + 1] = redis.call('ZCARD', ARGV[1] .. ARGV[a]) end
return out
"""
# KEYS: order. ARGV: term key head, n, term ('' none). Returns {doc, order, …} lowest first.
LOWEST = (
    _MANY
    + """
local n = tonumber(ARGV[2])
if ARGV[3] == '' then return redis.call('ZRANGE', KEYS[1], 0, n - 1, 'WITHSCORES') end
local members = redis.call('ZRANGE', ARGV[1] .. ARGV[3], 0, -1)
if #members == 0 then return {} end
local orders = many('ZMSCORE', KEYS[1], members)
local rows = {}
for p = 1, #members do
  if orders[p] then rows[#rows + 1] = {tonumber(orders[p]), members[p], orders[p]} end
end
table.sort(rows, function(a, b)
  if a[1] ~= b[1] then return a[1] < b[1] end
  return a[2] < b[2]
end)
local out = {}
for p = 1, math.min(n, #rows) do
  out[#out + 1] = rows[p][2]
  out[#out + 1] = rows[p][3]
end
return out
"""
)
SCRIPTS = {
    "put": PUT,
    "remove": REMOVE,
    "order": ORDER,
    "drop": DROP_ALL,
    "search": SEARCH,
    "stats": STATS,
    "lowest": LOWEST,
}
