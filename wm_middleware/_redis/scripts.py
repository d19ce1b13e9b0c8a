"""The server-side scripts of the shared tier, and how they are called.

Every key a script touches is passed in KEYS and shares the call's hash tag (one Cluster slot).
Tokens are made by the caller: Redis seeds a script's ``math.random`` the same way every time.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from redis.exceptions import NoScriptError

__all__ = ["GET_OR_LEASE", "REGISTER", "STORE", "Script", "aeval", "eval_sync"]


class Script:
    """A script's source and its SHA1, for EVALSHA with a fallback to EVAL."""

    __slots__ = ("sha", "source")

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.sha = hashlib.sha1(source).hexdigest()


def eval_sync(client: Any, script: Script, keys: list[str], args: list[Any]) -> Any:
    """Run ``script``; load it on the server first if it does not know it yet."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return client.eval(script.source, len(keys), *keys, *args)


async def aeval(client: Any, script: Script, keys: list[str], args: list[Any]) -> Any:
    """Async :func:`eval_sync`."""
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        return await client.eval(script.source, len(keys), *keys, *args)


# KEYS: entry, lease, token keys... ; ARGV: fresh token, token ttl ms, lease ms, owner,
# [registry key name, tenant] (standalone only: the registry lives in another slot)
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
  if nl and string.match(string.sub(v, 1, nl - 1), '^wm1 (%S+)') == sig then
    return {'HIT', v}
  end
end
if redis.call('SET', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[3]) then
  if ARGV[5] then
    redis.call('SADD', ARGV[5], ARGV[6])
    if redis.call('PTTL', ARGV[5]) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', ARGV[5], ARGV[2])
    end
  end
  return {'LEASE', sig}
end
return {'WAIT', redis.call('GET', KEYS[2]) or '', redis.call('PTTL', KEYS[2])}
"""
)

# KEYS: entry, lease, signal, token keys... ; ARGV: signature, owner, envelope ('' = release
# only), entry ttl ms, signal ms. Returns 1 stored, 0 refused (tokens changed) or released.
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
    redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
    for i = 4, #KEYS do
      if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[4]) then
        redis.call('PEXPIRE', KEYS[i], ARGV[4])
      end
    end
    stored = 1
  end
end
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
redis.call('RPUSH', KEYS[3], '1')
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
