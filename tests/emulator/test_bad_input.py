"""Bad JSON and non-finite numbers get a JSON 400 and store nothing."""

from __future__ import annotations

import httpx
import pytest

from wm_middleware.emulator import EmulatorServer

from .conftest import KEY

_API_BODIES = {
    "/v4/search": ['{"q": "x", "limit": 1e999}', '{"q": "x", "limit": NaN}', '{"q": "x",'],
    "/v3/documents": [
        '{"content": "a", "containerTag": "t", "metadata": {"score": NaN}}',
        '{"content": "a", "containerTag": "t", "metadata": {"score": -1e999}}',
    ],
    "/ns/t/search": ['{"query": "x", "limit": Infinity}'],
    "/ns/t/document": ['{"content": "a", "metadata": {"score": NaN}}'],
}


@pytest.mark.parametrize(
    ("path", "body"), [(path, body) for path, bodies in _API_BODIES.items() for body in bodies]
)
def test_non_finite_numbers_and_bad_json_get_a_json_400_and_store_nothing(
    server: EmulatorServer, path: str, body: str
) -> None:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    with httpx.Client(base_url=server.base_url, headers=headers) as http:
        r = http.post(path, content=body.encode())
        assert r.status_code == 400
        assert r.json()["error"] == "Invalid request"
        # Nothing was stored that could break a later answer about the same tag.
        assert http.post("/v4/search", json={"q": "a", "containerTag": "t"}).status_code == 200
        assert http.post("/ns/t/search", json={"query": "a"}).status_code == 200


def test_nan_metadata_in_a_file_upload_is_refused(server: EmulatorServer) -> None:
    headers = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=server.base_url, headers=headers) as http:
        r = http.post(
            "/v3/documents/file",
            files={"file": ("a.txt", b"User likes tea")},
            data={"containerTags": '["t"]', "metadata": '{"score": NaN}'},
        )
        assert r.status_code == 400
        assert r.json()["error"] == "Invalid request"
        assert http.post("/v4/search", json={"q": "tea", "containerTag": "t"}).status_code == 200
