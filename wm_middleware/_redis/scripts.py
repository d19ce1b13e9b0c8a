"""The server-side scripts of the shared tier, and how they are called.

Every key a script touches is passed in KEYS and shares the call's hash tag (one Cluster slot).
Tokens are made by the caller: Redis seeds a script's ``math.random`` the same way every time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

from redis.exceptions import NoScriptError

__all__ = [
    "BEGIN_SETTLE",
    "GET_OR_LEASE",
    "POOL_EVIDENCE",
    "REGISTER",
    "STORE",
    "Run",
    "Script",
    "arun",
    "run",
]


class Script:
    """A script's source and its SHA1, for EVALSHA with a fallback to EVAL."""

    __slots__ = ("sha", "source")

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.sha = hashlib.sha1(source).hexdigest()


@dataclass(frozen=True, slots=True)
class Run:
    """One round trip: a script with its keys and arguments, or a plain command (``args``)."""

    args: tuple[Any, ...]
    script: Script | None = None
    keys: tuple[str, ...] = ()


def run(client: Any, step: Run) -> Any:
    """Send ``step`` on a sync client; a script unknown to the server is sent in full."""
    if step.script is None:
        return client.execute_command(*step.args)
    try:
        return client.evalsha(step.script.sha, len(step.keys), *step.keys, *step.args)
    except NoScriptError:
        return client.eval(step.script.source, len(step.keys), *step.keys, *step.args)


async def arun(client: Any, step: Run) -> Any:
    """Async :func:`run`."""
    if step.script is None:
        return await client.execute_command(*step.args)
    try:
        return await client.evalsha(step.script.sha, len(step.keys), *step.keys, *step.args)
    except NoScriptError:
        return await client.eval(step.script.source, len(step.keys), *step.keys, *step.args)


# KEYS: entry, lease, token keys... ; ARGV: 1 fresh token, 2 token ttl ms, 3 lease ms, 4 owner,
# 5 now (ms since the epoch), 6 header of an entry the caller could not read ('' if none),
# 7 registry key, 8 tenant (standalone only: on Cluster the registry lives in another slot).
# An entry is a hit only if its tokens match and its own expiry (the envelope's) is ahead: a key
# whose TTL was removed by hand is never served past it. A lease without a TTL is given one, so
# waiters always block for a bounded time instead of polling. Asked again by its own holder (a
# retry after a lost reply), the lease is this caller's: LEASE again, never a wait on itself.
GET_OR_LEASE: Final = Script(
    b"""
local sig = {}
for i = 3, #KEYS do
  local t = redis.call('GET', KEYS[i])
  if not t then
    t = ARGV[1] .. i
    redis.call('SET', KEYS[i], t, 'PX', ARGV[2])
  end
  sig[#sig + 1] = t
end
sig = table.concat(sig, ',')
local v = redis.call('GET', KEYS[1])
if v then
  local nl = string.find(v, '\\n', 1, true)
  if nl then
    local header = string.sub(v, 1, nl - 1)
    local s, expires = string.match(header, '^wm2 (%S+) (%d+) ')
    if s == sig and tonumber(expires) > tonumber(ARGV[5]) and header ~= ARGV[6] then
      return {'HIT', v}
    end
  end
end
local holder = redis.call('GET', KEYS[2])
if holder == ARGV[4] then
  return {'LEASE', sig}
end
if not holder and redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3]) then
  if ARGV[7] ~= '' then
    redis.call('SADD', ARGV[7], ARGV[8])
    if redis.call('PTTL', ARGV[7]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', ARGV[7], ARGV[2])
    end
  end
  return {'LEASE', sig}
end
local left = redis.call('PTTL', KEYS[2])
if left < 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  left = tonumber(ARGV[3])
end
return {'WAIT', holder, left}
"""
)

# KEYS: entry, lease, signal, token keys... ; ARGV: signature, owner, envelope ('' = release
# only), entry ttl ms, signal ms. Returns 1 stored, 0 refused (tokens changed) or released, -1
# the entry refused by the server (out of memory). The lease is released and the waiters woken
# in every case, a full server included: the first write (PEXPIRE) needs no memory, and once a
# script has written, the server lets it finish.
STORE: Final = Script(
    b"""
local stored = 0
if ARGV[3] ~= '' then
  local cur = {}
  for i = 4, #KEYS do
    local t = redis.call('GET', KEYS[i])
    if not t then cur = nil break end
    cur[#cur + 1] = t
  end
  if cur and table.concat(cur, ',') == ARGV[1] then
    local ok = redis.pcall('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
    if type(ok) == 'table' and ok.err then
      stored = -1
    else
      for i = 4, #KEYS do
        if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[4]) then
          redis.call('PEXPIRE', KEYS[i], ARGV[4])
        end
      end
      stored = 1
    end
  end
end
redis.call('PEXPIRE', KEYS[3], ARGV[5])
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
redis.pcall('RPUSH', KEYS[3], '1')
redis.call('PEXPIRE', KEYS[3], ARGV[5])
return stored
"""
)

# KEYS: registry; ARGV: tenant, ttl ms. The registry lists the tenants that may hold entries, so
# an invalidation naming no tenant reaches them all. Run apart only on Cluster (another slot).
REGISTER: Final = Script(
    b"""
redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
"""
)


# KEYS: the settling hash; ARGV: 1 ms to live, 2 channel, 3 message, 4.. field, value pairs.
# Sets each scope's deadline, lengthens (never shortens) the hash's expiry to the latest
# deadline, and announces the settle.
BEGIN_SETTLE: Final = Script(
    b"""
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
"""
)


# KEYS: a configuration family's evidence hash; ARGV: 1 ms to live, 2.. field, value pairs (this
# process's totals, one field per band). Stores them, lengthens the hash's life when it did, and
# returns the whole hash: every process's totals, each counted once.
POOL_EVIDENCE: Final = Script(
    b"""
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if #ARGV > 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return redis.call('HGETALL', KEYS[1])
"""
)
