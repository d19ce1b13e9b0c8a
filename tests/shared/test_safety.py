"""Safety of the shared store: no pickle, every key expires, no API key, bounded JSON values."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from wm_middleware._api.tenancy import tenant_of

from .conftest import HeldLeader, InThread, patient_tier

API_KEY = "sm_live_0123456789abcdefSECRET"


class Evil:
    """Unpickling this runs code: a shared store must never unpickle what it reads."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path(self.path).touch, ())


def all_keys(raw: redis.Redis) -> list[bytes]:
    return [k for k in raw.scan_iter(count=1000) if not k.startswith(b"test:")]


def test_a_forged_pickle_entry_is_never_unpickled(
    redis_url: str, raw: redis.Redis, tmp_path: Path
) -> None:
    tier = patient_tier(redis_url)
    tier.load("q", (), 60.0, lambda: {"ok": True})
    (entry,) = [k for k in all_keys(raw) if b":e:" in k]
    header = raw.get(entry).split(b"\n", 1)[0]  # type: ignore[union-attr]
    marker = tmp_path / "pwned"
    raw.set(entry, header + b"\n" + pickle.dumps(Evil(str(marker))), px=60_000)
    result = tier.load("q", (), 60.0, lambda: {"fetched": True})
    assert result.value == {"fetched": True}
    assert not marker.exists()
    assert tier.errors == 1  # an entry that does not decode is a tier failure, then a fetch


def test_values_are_stored_as_json(redis_url: str, raw: redis.Redis) -> None:
    tier = patient_tier(redis_url)
    value = {"results": [{"memory": "likes tea", "similarity": 0.9, "tags": None}], "total": 1}
    tier.load("q", (), 60.0, lambda: value)
    (entry,) = [k for k in all_keys(raw) if b":e:" in k]
    assert json.loads(raw.get(entry).split(b"\n", 1)[1]) == value  # type: ignore[union-attr]


def test_every_key_written_has_a_ttl(redis_url: str, raw: redis.Redis) -> None:
    tier = patient_tier(redis_url, lease=5.0)
    scopes = (("tenant", tenant_of("https://x", API_KEY)), "q")
    tier.load("a", scopes, 60.0, lambda: [1])
    tier.load("a", scopes, 60.0, lambda: [1])
    with pytest.raises(KeyError):
        tier.load("b", scopes, 60.0, lambda: {}["missing"])
    tier.load("c", (), 60.0, lambda: (1, 2))  # not JSON-shaped: stays local
    tier.invalidate(keys=["a"], scopes=scopes)
    tier.load("a", scopes, 60.0, lambda: [2])
    tier.clear()
    keys = all_keys(raw)
    assert len(keys) > 5
    assert {k: raw.pttl(k) for k in keys if raw.pttl(k) <= 0} == {}


def test_the_api_key_never_reaches_redis(redis_url: str, raw: redis.Redis) -> None:
    tier = patient_tier(redis_url, secret="fleet-secret")
    tenant = tenant_of("https://api.supermemory.ai", API_KEY)
    key = ("sdk3", tenant, "search.memories", '{"q":"prefs"}')
    scopes = (("tenant", tenant), ("tag", tenant, "user-1"), "prefs")
    tier.load(key, scopes, 60.0, lambda: {"results": []})
    tier.invalidate(scopes=[("tag", tenant, "user-1")])
    for name in all_keys(raw):
        kind = raw.type(name)
        if kind == b"string":
            blob = name + (raw.get(name) or b"")
        elif kind == b"set":
            blob = name + b"".join(raw.smembers(name))
        else:
            blob = name + b"".join(raw.lrange(name, 0, -1))
        assert API_KEY.encode() not in blob
        assert tenant[1].encode() not in blob  # not even the unsalted fingerprint


def test_a_secret_changes_the_tenant_fingerprint(redis_url: str, raw: redis.Redis) -> None:
    scopes = (("tenant", tenant_of("https://x", API_KEY)),)
    patient_tier(redis_url, secret=b"one").load("q", scopes, 60.0, lambda: 1)
    patient_tier(redis_url, secret="two").load("q", scopes, 60.0, lambda: 1)
    tags = {k.split(b"{", 1)[1].split(b"}", 1)[0] for k in all_keys(raw) if b":e:" in k}
    assert len(tags) == 2


@pytest.mark.parametrize(
    "value",
    [
        pytest.param((1, 2), id="tuple"),
        pytest.param(b"bytes", id="bytes"),
        pytest.param({1: "int key"}, id="int-key"),
        pytest.param({"x": float("nan")}, id="nan"),
        pytest.param("x" * 2048, id="over-the-cap"),
    ],
)
def test_a_value_that_cannot_be_shared_stays_local_and_others_fetch_at_once(
    redis_url: str, value: Any
) -> None:
    leader = patient_tier(redis_url, max_value_bytes=1024, lease=30.0)
    other = patient_tier(redis_url, max_value_bytes=1024, lease=30.0)
    held = HeldLeader(leader, "q", value)
    waiting = InThread(lambda: other.load("q", (), 60.0, str))
    time.sleep(0.05)
    led = held.finish()
    assert led.value is value
    assert led.outcome == "fetched"
    found = waiting.join()  # woken by the leader: it fetched for itself at once
    assert (found.value, found.outcome) == ("", "fetched")
    later = other.load("q", (), 60.0, lambda: "own")
    assert (later.value, later.outcome) == ("own", "fetched")  # no lease queue: fetch here
    assert leader.errors == other.errors == 0


def test_custom_codec_is_used_both_ways(redis_url: str, raw: redis.Redis) -> None:
    tier = patient_tier(
        redis_url,
        encode=lambda v: repr(sorted(v)).encode(),
        decode=lambda b: set(json.loads(b.decode())),
    )
    tier.load("q", (), 60.0, lambda: {3, 1, 2})
    (entry,) = [k for k in all_keys(raw) if b":e:" in k]
    assert raw.get(entry).endswith(b"\n[1, 2, 3]")  # type: ignore[union-attr]
    assert tier.load("q", (), 60.0, set).value == {1, 2, 3}


def test_the_api_key_is_kept_nowhere_once_fingerprinted() -> None:
    from wm_middleware._api import tenancy

    tenant = tenant_of("https://x", API_KEY)
    assert tenant[1] == tenancy.fingerprint(API_KEY) != API_KEY
    held = [v for v in vars(tenancy).values() if isinstance(v, (dict, set, list, tuple))]
    assert not [v for v in held if API_KEY in v or API_KEY in map(str, v)]
