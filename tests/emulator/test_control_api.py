"""The control API under ``/_emulator``, request counting and API keys, over real HTTP."""

from __future__ import annotations

import httpx
import pytest

from wm_middleware.emulator import EmulatorServer

from .conftest import KEY, OTHER_KEY


def test_control_api_over_http(server: EmulatorServer) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        assert http.get("/_emulator/health").json() == {"ok": True}
        r = http.post("/v4/search", json={"q": "x"})  # no Authorization header
        assert r.status_code == 401
        assert r.json()["error"] == "Unauthorized"
        stats = http.get("/_emulator/stats").json()
        assert stats["counts"] == {"POST /v4/search": 1}
        assert stats["total"] == 1
        http.post("/_emulator/faults", json={"status": 503, "count": 1, "path": "/ns/*"})
        assert server.faults.pending[0].status == 503
        seeded = http.post(
            "/_emulator/seed", json={"apiKey": OTHER_KEY, "memories": ["Bob likes jazz"]}
        ).json()
        assert len(seeded["ids"]) == 1
        http.post("/_emulator/reset", json={})
        assert server.count() == 0
        assert server.faults.pending == []
        assert server.store.tenants() == []


_CONTROL_PATHS = ["/_emulator/reset", "/_emulator/seed", "/_emulator/faults", "/_emulator/latency"]
_BAD_BODIES = {
    "invalid": b"{not json",
    "nan": b'{"apiKey": "k", "errorRate": NaN, "latency": NaN}',
    "overflow": b'{"apiKey": "k", "errorRate": 1e999, "latency": 1e999}',
    "infinity": b'{"apiKey": "k", "errorRate": -Infinity}',
    "not_an_object": b"[1, 2]",
}


@pytest.mark.parametrize("body", sorted(_BAD_BODIES))
@pytest.mark.parametrize("path", _CONTROL_PATHS)
def test_a_bad_control_body_gets_a_json_400(server: EmulatorServer, path: str, body: str) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        r = http.post(path, content=_BAD_BODIES[body], headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"] == "Invalid request"


def test_a_bad_control_value_gets_a_json_400(server: EmulatorServer) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        r = http.post("/_emulator/faults", json={"errorRate": 0.5, "statuses": ["x"]})
    assert r.status_code == 400
    assert r.json()["error"] == "Invalid request"


def test_counts_glob_and_reset(server: EmulatorServer) -> None:
    with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {KEY}"}) as h:
        h.post("/v4/search", json={"q": "allergy"})
        h.post("/ns/user-1/search", json={"query": "allergy"})
        h.post("/ns/user-2/search", json={"query": "allergy"})
    assert server.count("POST", "/v4/search") == 1
    assert server.count("POST", "/ns/*/search") == 2
    assert server.counts[("POST", "/ns/user-2/search")] == 1
    last = server.last_request("POST", "/ns/user-1/search")
    assert last is not None
    assert last.json == {"query": "allergy"}
    server.reset_counts()
    assert server.count() == 0


def test_api_keys_restrict_tenants() -> None:
    with (
        EmulatorServer(api_keys=[KEY]) as srv,
        httpx.Client(base_url=srv.base_url) as http,
    ):
        ok = http.post("/v4/search", json={"q": "x"}, headers={"Authorization": f"Bearer {KEY}"})
        bad = http.post("/v4/search", json={"q": "x"}, headers={"Authorization": "Bearer nope"})
    assert ok.status_code == 200
    assert bad.status_code == 401
