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


def px(seconds: float) -> int:
    """``seconds`` as a script's PX argument: whole milliseconds, at least 1."""
    return max(1, math.ceil(seconds * 1000))


def ttl_arg(ttl: float | None) -> str:
    """A value's expiry as a script's PX argument ('0': no expiry, or keep the current one)."""
    return "0" if ttl is None else str(px(check_ttl(ttl)))
