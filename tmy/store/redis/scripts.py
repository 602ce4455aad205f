"""The Lua scripts the Redis store runs, and how their arguments are encoded.

Every write is a script so that it can carry an operation id and record it next
to the key it writes (see :mod:`tmy.store.redis`): a copy of the command that
redis-py resends after a lost reply finds the record and applies nothing. Each
script's keys share one hash slot, so a script runs on one cluster node.
"""

from __future__ import annotations

import math

from tmy.store.codec import check_ttl

# KEYS: the value, the write record, the key's turn. ARGV: expect ('1' a value /
# '0' absence), expected raw, op ('s' set / 'd' delete), new raw, PX milliseconds
# ('0' keeps the current expiry), attempt number, record PX milliseconds, this
# store's turn token.
# Returns the number of the attempt that applied this operation — this one, or an
# earlier copy or attempt whose reply was lost — else {current raw} ({} when absent),
# or {'', '', ms} when another process holds the key's turn for ms more milliseconds.
CAS = """
if not redis.call('SET', KEYS[2], ARGV[6], 'NX', 'PX', ARGV[7]) then
  return tonumber(redis.call('GET', KEYS[2]))
end
local turn = redis.call('GET', KEYS[3])
if turn and turn ~= ARGV[8] then
  redis.call('DEL', KEYS[2])
  return {'', '', redis.call('PTTL', KEYS[3])}
end
local cur = redis.call('GET', KEYS[1])
local stale
if ARGV[1] == '1' then stale = cur ~= ARGV[2] else stale = cur ~= false end
if stale then
  redis.call('DEL', KEYS[2])
  if cur then return {cur} end
  return {}
end
if ARGV[3] == 'd' then
  if cur then redis.call('DEL', KEYS[1]) end
elseif ARGV[5] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[4], 'KEEPTTL')
end
return tonumber(ARGV[6])
"""
# KEYS: the value, the write record. ARGV: op ('s' set / 'd' delete), raw,
# PX milliseconds ('0' never expires), record PX milliseconds.
# Returns 1 for a set, the number of keys removed for a delete — recorded, so a
# resent copy returns what the first one did and writes nothing.
PUT = """
local done = redis.call('GET', KEYS[2])
if done then return tonumber(done) end
local result = 1
if ARGV[1] == 'd' then
  result = redis.call('DEL', KEYS[1])
elseif ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
redis.call('SET', KEYS[2], result, 'PX', ARGV[4])
return result
"""
# ARGV: token, PX. Returns 0 when the lease is ours, else {remaining ms, holder's token}.
TAKE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left < 1 then left = 1 end
return {left, holder}
"""
# ARGV: token. Deletes the lease only if it holds that token.
GIVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# ARGV: token, PX. Extends the lease only if it holds that token; 1 when extended.
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# KEYS: the write record, then N lease keys, then the keys written. ARGV: N,
# record PX milliseconds, the N lease tokens, then per key written: op ('s' set /
# 'd' delete), raw, PX milliseconds ('0' never expires).
# Returns 0 when applied (by this copy or an earlier one whose reply was lost),
# else i: the i-th lease no longer holds its token (nothing was written).
COMMIT = """
if redis.call('GET', KEYS[1]) then return 0 end
local n = tonumber(ARGV[1])
for i = 1, n do
  if redis.call('GET', KEYS[1 + i]) ~= ARGV[2 + i] then return i end
end
local a = 3 + n
for j = 2 + n, #KEYS do
  if ARGV[a] == 'd' then
    redis.call('DEL', KEYS[j])
  elseif ARGV[a + 2] ~= '0' then
    redis.call('SET', KEYS[j], ARGV[a + 1], 'PX', ARGV[a + 2])
  else
    redis.call('SET', KEYS[j], ARGV[a + 1])
  end
  a = a + 3
end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
return 0
"""

# -- snapshots and boards (reads and idempotent writes: no write records needed) ----------

# KEYS: value keys (one hash slot). Returns {raw or false, PTTL, raw or false, PTTL, …}:
# each key's value and remaining life read together (PTTL -1: no expiry, -2: gone).
SNAP = """
local out = {}
for i = 1, #KEYS do
  out[2 * i - 1] = redis.call('GET', KEYS[i])
  out[2 * i] = redis.call('PTTL', KEYS[i])
end
return out
"""

# No KEYS (the script finds them: a single Redis only). ARGV: the value keys' SCAN
# pattern, the boards' SCAN pattern, the boards' key head ('{prefix}:rank:'), the names'
# head ('{prefix}:rank-names:'), the format marker's key, the most keys (values and
# board entries) and the most bytes to read. Reads the store at one point in time (a
# script runs alone): {1, {key, raw, PTTL, …}, {board key, {member, score, …},
# {member, name, …}, …}}; {0} when the store is over either bound (nothing read).
# Value keys end in '}' (leases end in ':lock', write records in ':op:…', turns in ':turn').
SNAP_ALL = """
local max_keys, max_bytes = tonumber(ARGV[6]), tonumber(ARGV[7])
local function scan(pattern)
  local found, cursor = {}, '0'
  repeat
    local page = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000)
    cursor = page[1]
    for _, k in ipairs(page[2]) do found[#found + 1] = k end
  until cursor == '0'
  return found
end
local values, count = {}, 0
for _, k in ipairs(scan(ARGV[1])) do
  if string.sub(k, -1) == '}' and k ~= ARGV[5] then
    values[#values + 1] = k
    count = count + 1
  end
end
if count > max_keys then return {0} end
local boards = scan(ARGV[2])
for _, z in ipairs(boards) do count = count + redis.call('ZCARD', z) end
if count > max_keys then return {0} end
local bytes, flat = 0, {}
for _, k in ipairs(values) do
  local raw = redis.call('GET', k)
  if raw then
    bytes = bytes + #raw + #k
    if bytes > max_bytes then return {0} end
    flat[#flat + 1] = k
    flat[#flat + 1] = raw
    flat[#flat + 1] = redis.call('PTTL', k)
  end
end
local ranks = {}
for _, z in ipairs(boards) do
  local names = ARGV[4] .. string.sub(z, #ARGV[3] + 1)
  local members = redis.call('ZRANGE', z, 0, -1, 'WITHSCORES')
  local named = redis.call('HGETALL', names)
  for _, part in ipairs(members) do bytes = bytes + #part end
  for _, part in ipairs(named) do bytes = bytes + #part end
  if bytes > max_bytes then return {0} end
  ranks[#ranks + 1] = z
  ranks[#ranks + 1] = members
  ranks[#ranks + 1] = named
end
return {1, flat, ranks}
"""

# Board keys: KEYS[b] the sorted set (member -> score), KEYS[b + 1] the hash of names.
# ARGV[a]: member, ARGV[a + 1]: the value's raw JSON, ARGV[a + 2]: '1' when a name is
# given, ARGV[a + 3]: the name. A raw JSON text Lua reads as a number (JSON numbers, and
# nothing else JSON writes: strings are quoted, true/false/null/[/{ are not numbers)
# becomes the member's score (ZADD takes the JSON text as is); anything else (or no
# value) removes the member and its name. Returns the raw score text or false.
_RANK_APPLY = """
local function apply(raw, b, a)
  if raw and tonumber(raw) then
    redis.call('ZADD', KEYS[b], raw, ARGV[a])
    if ARGV[a + 2] == '1' then redis.call('HSET', KEYS[b + 1], ARGV[a], ARGV[a + 3]) end
    return raw
  end
  redis.call('ZREM', KEYS[b], ARGV[a])
  redis.call('HDEL', KEYS[b + 1], ARGV[a])
  return false
end
"""
# KEYS: the value, the sorted set, the names. ARGV: member, '' (unused), '1'/'0' name
# given, name. Reads the value and makes the board agree, in one step (one Redis).
RANK_SYNC = (
    _RANK_APPLY
    + """
return apply(redis.call('GET', KEYS[1]), 2, 1)
"""
)
# KEYS: the sorted set, the names. ARGV: member, raw value ('' none), '1'/'0', name.
# The cluster's second half of a sync (the value was read by a GET in another slot).
RANK_SET = (
    _RANK_APPLY
    + """
local raw = ARGV[2]
if raw == '' then raw = false end
return apply(raw, 1, 1)
"""
)
# KEYS: the sorted set, the names. ARGV: n. Returns {member, score, name or false, …},
# highest first, ties by member descending (ZREVRANGE's order).
RANK_TOP = """
local top = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
if #top == 0 then return {} end
local members = {}
for i = 1, #top, 2 do members[#members + 1] = top[i] end
local names = redis.call('HMGET', KEYS[2], unpack(members))
local out = {}
for i = 1, #members do
  out[#out + 1] = members[i]
  out[#out + 1] = top[2 * i]
  out[#out + 1] = names[i]
end
return out
"""
# KEYS: the sorted set. ARGV: member. 1 + members scoring strictly higher, or false.
RANK_OF = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return false end
return redis.call('ZCOUNT', KEYS[1], '(' .. score, '+inf') + 1
"""
# KEYS: the sorted set, the names. ARGV: member. {score, name or false}, or false.
RANK_ENTRY = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return false end
return {score, redis.call('HGET', KEYS[2], ARGV[1])}
"""
# KEYS: the sorted set, the names. ARGV: ZSCAN cursor. {next cursor, member, score,
# name or false, …}: one page of a board with its names, read together.
RANK_PAGE = """
local page = redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', 500)
local items = page[2]
local out = {page[1]}
if #items == 0 then return out end
local members = {}
for i = 1, #items, 2 do members[#members + 1] = items[i] end
local names = redis.call('HMGET', KEYS[2], unpack(members))
for i = 1, #members do
  out[#out + 1] = members[i]
  out[#out + 1] = items[2 * i]
  out[#out + 1] = names[i]
end
return out
"""


def px(seconds: float) -> int:
    """``seconds`` as a script's PX argument: whole milliseconds, at least 1."""
    return max(1, math.ceil(seconds * 1000))


def ttl_arg(ttl: float | None) -> str:
    """A value's expiry as a script's PX argument ('0': no expiry, or keep the current one)."""
    return "0" if ttl is None else str(px(check_ttl(ttl)))
