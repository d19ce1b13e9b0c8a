"""Tests for the Supermemory API emulator, driven through the real ``supermemory`` SDK.

Tests for the SDK generation that is not installed in the running venv are skipped:
run the suite in both venvs (supermemory 3.x and 5.x).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from wm_middleware.emulator import Emulator, EmulatorServer, SeedMemory
from wm_middleware.emulator.text import rank, tokenize

supermemory = pytest.importorskip("supermemory")

SDK_MAJOR = int(importlib.metadata.version("supermemory").split(".")[0])
v3_only = pytest.mark.skipif(SDK_MAJOR != 3, reason="needs the supermemory 3.x SDK")
v5_only = pytest.mark.skipif(SDK_MAJOR < 5, reason="needs the supermemory 5.x SDK")

KEY = "sk-test-alice"
OTHER_KEY = "sk-test-bob"
TAG = "user-1"

SEEDS: list[Any] = [
    SeedMemory("User has a severe peanut allergy", container_tag=TAG, metadata={"kind": "health"}),
    SeedMemory("User likes hiking in the Alps on weekends", container_tag=TAG),
    SeedMemory("User lives in Berlin with two cats", container_tag=TAG, metadata={"kind": "home"}),
    SeedMemory("User's name is Ada Lovelace", container_tag=TAG, static=True),
    SeedMemory("User prefers vegetarian food", container_tag=TAG, bucket="food"),
    "Another user is allergic to shellfish",  # goes to the "other-user" tag below
]


@pytest.fixture
def server() -> Iterator[EmulatorServer]:
    with EmulatorServer(seed=42) as srv:
        srv.seed(KEY, SEEDS[:-1])
        srv.seed(KEY, SEEDS[-1:], container_tag="other-user")
        yield srv


def sync_client(server: EmulatorServer, **kw: Any) -> Any:
    kw.setdefault("max_retries", 0)
    return supermemory.Supermemory(api_key=kw.pop("api_key", KEY), base_url=server.base_url, **kw)


def async_client(server: EmulatorServer, **kw: Any) -> Any:
    kw.setdefault("max_retries", 0)
    return supermemory.AsyncSupermemory(
        api_key=kw.pop("api_key", KEY), base_url=server.base_url, **kw
    )


# ------------------------------------------------------------ generation-agnostic


def test_ranking_is_lexical_with_light_stemming() -> None:
    assert tokenize("What are my allergies?") == ["allergy"]
    scores = rank("allergies", ["peanut allergy", "hiking in the Alps", "lives in Berlin"])
    assert scores[0] > 0.5
    assert scores[1] == scores[2] == 0.0
    assert all(0.0 <= s <= 1.0 for s in rank("user lives Berlin", ["User lives in Berlin", "x"]))


def test_store_search_limit_threshold_and_scope() -> None:
    em = Emulator(seed=1)
    em.seed(KEY, SEEDS[:-1])
    hits = em.store.search_memories(KEY, "user", container_tags=[TAG], limit=2)
    assert len(hits) == 2
    assert em.store.search_memories(KEY, "allergy", container_tags=["nope"]) == []
    assert em.store.search_memories(OTHER_KEY, "allergy") == []
    assert em.store.search_memories(KEY, "peanut hiking cats", threshold=0.99) == []


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


def test_indexing_delay_hides_new_documents() -> None:
    em = Emulator(indexing_delay=60)
    doc = em.store.add_document(KEY, "User owns a red bicycle", container_tags=[TAG])
    assert doc.status == "queued"
    assert em.store.search_memories(KEY, "bicycle") == []
    doc.ready_at = 0
    assert em.store.search_memories(KEY, "bicycle")[0][0].memory == "User owns a red bicycle"


# ------------------------------------------------------------------------- 3.x


@v3_only
class TestV3:
    def test_search_memories_ranks_and_parses(self, server: EmulatorServer) -> None:
        from supermemory.types import SearchMemoriesResponse

        client = sync_client(server)
        raw = client.search.with_raw_response.memories(
            q="allergies",
            container_tag=TAG,
            include={"documents": True, "relatedMemories": True, "summaries": True},
        )
        strict = SearchMemoriesResponse.model_validate(raw.http_response.json())
        res = raw.parse()
        assert isinstance(res, SearchMemoriesResponse)
        assert res.results[0].memory == "User has a severe peanut allergy"
        assert strict.results[0].id == res.results[0].id
        top = res.results[0]
        assert 0.0 < top.similarity <= 1.0
        assert top.metadata == {"kind": "health"}
        assert top.updated_at.endswith("Z")
        assert top.documents
        assert top.documents[0].title
        assert top.context is not None
        assert res.total == len(res.results)
        req = server.last_request("POST", "/v4/search")
        assert req is not None
        assert req.headers["authorization"] == f"Bearer {KEY}"
        assert req.json["containerTag"] == TAG

    def test_limit_threshold_and_isolation(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        assert len(client.search.memories(q="user", container_tag=TAG, limit=2).results) == 2
        assert client.search.memories(q="peanut hiking cats", threshold=0.99).results == []
        # tag isolation: the shellfish memory lives in another container tag
        mine = client.search.memories(q="allergic allergy", container_tag=TAG).results
        assert [r.memory for r in mine] == ["User has a severe peanut allergy"]
        # tenant isolation
        other = sync_client(server, api_key=OTHER_KEY)
        assert other.search.memories(q="allergy").results == []

    def test_filters(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        res = client.search.memories(
            q="user",
            container_tag=TAG,
            filters={"AND": [{"key": "kind", "value": "home"}]},
        )
        assert [r.memory for r in res.results] == ["User lives in Berlin with two cats"]

    def test_document_search_execute_and_documents(self, server: EmulatorServer) -> None:
        from supermemory.types import SearchDocumentsResponse, SearchExecuteResponse

        client = sync_client(server)
        res = client.search.execute(q="Berlin cats", container_tags=[TAG], include_full_docs=True)
        assert isinstance(res, SearchExecuteResponse)
        assert res.results[0].chunks[0].content == "User lives in Berlin with two cats"
        assert res.results[0].chunks[0].is_relevant
        assert res.results[0].content == "User lives in Berlin with two cats"
        docs = client.search.documents(q="hiking", limit=1)
        assert isinstance(docs, SearchDocumentsResponse)
        assert len(docs.results) == 1
        assert server.count("POST", "/v3/search") == 2

    def test_profile(self, server: EmulatorServer) -> None:
        from supermemory.types import ProfileResponse

        client = sync_client(server)
        prof = client.profile(container_tag=TAG, q="where does the user live")
        assert isinstance(prof, ProfileResponse)
        assert prof.profile.static == ["User's name is Ada Lovelace"]
        assert "User has a severe peanut allergy" in (prof.profile.dynamic or [])
        assert prof.profile.buckets == {"food": ["User prefers vegetarian food"]}
        assert prof.search_results is not None
        assert prof.search_results.results[0].memory == "User lives in Berlin with two cats"
        assert client.profile(container_tag=TAG).search_results is None
        only = client.profile(container_tag=TAG, include=["static"])
        assert only.profile.dynamic is None

    def test_document_lifecycle(self, server: EmulatorServer) -> None:
        from supermemory.types import DocumentGetResponse, DocumentListResponse

        client = sync_client(server)
        added = client.add(
            content="User works as a nurse. User plays the violin.",
            container_tag=TAG,
            custom_id="chat-1",
            metadata={"source": "chat"},
        )
        assert added.status == "done"
        hit = client.search.memories(q="violin", container_tag=TAG).results[0]
        assert hit.memory == "User plays the violin."
        doc = client.documents.get(added.id)
        assert isinstance(doc, DocumentGetResponse)
        assert doc.custom_id == "chat-1"
        assert doc.container_tags == [TAG]
        assert doc.memories is not None
        assert len(doc.memories) == 2
        listed = client.documents.list(container_tags=[TAG], limit=2, page=1)
        assert isinstance(listed, DocumentListResponse)
        assert listed.pagination.total_items == 6
        assert listed.pagination.total_pages == 3
        assert listed.memories[0].id == added.id
        upd = client.documents.update(added.id, content="User works as a pilot.")
        assert upd.id == added.id
        assert client.search.memories(q="violin", container_tag=TAG).results == []
        client.documents.delete(added.id)
        with pytest.raises(supermemory.NotFoundError):
            client.documents.get(added.id)

    def test_batch_upload_bulk_delete_processing(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        batch = client.documents.batch_add(
            documents=[{"content": "User drinks green tea"}, "User drives a blue car"],
            container_tag="batch-tag",
        )
        assert batch.success == 2
        assert batch.failed == 0
        up = client.documents.upload_file(
            file=("notes.txt", b"User collects vinyl records", "text/plain"),
            container_tag="batch-tag",
            metadata='{"origin": "upload"}',
        )
        assert client.documents.get(up.id).metadata == {"origin": "upload"}
        found = client.search.memories(q="vinyl", container_tag="batch-tag").results
        assert found[0].memory == "User collects vinyl records"
        assert client.documents.list_processing().total_count == 0
        deleted = client.documents.delete_bulk(container_tags=["batch-tag"])
        assert deleted.success
        assert deleted.deleted_count == 3

    def test_memories_update_and_forget(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        old = client.search.memories(q="Berlin", container_tag=TAG).results[0]
        new = client.memories.update_memory(
            container_tag=TAG, id=old.id, new_content="User lives in Munich with two cats"
        )
        assert new.version == 2
        assert new.parent_memory_id == old.id
        assert new.root_memory_id == old.id
        res = client.search.memories(q="cats", container_tag=TAG).results
        assert [r.memory for r in res] == ["User lives in Munich with two cats"]
        gone = client.memories.forget(container_tag=TAG, content="User prefers vegetarian food")
        assert gone.forgotten
        assert client.search.memories(q="vegetarian", container_tag=TAG).results == []
        with pytest.raises(supermemory.NotFoundError):
            client.memories.forget(container_tag=TAG, id="does-not-exist")

    def test_settings(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        client.settings.update(profile_buckets=[{"key": "travel", "description": "Trips"}])
        got = client.settings.get()
        assert got.profile_buckets is not None
        assert got.profile_buckets[0].key == "travel"
        assert "travel" in (client.profile(container_tag=TAG).profile.buckets or {})

    async def test_async_client(self, server: EmulatorServer) -> None:
        async with async_client(server) as client:
            added = await client.add(content="User is learning Japanese", container_tag=TAG)
            res = await client.search.memories(q="japanese", container_tag=TAG)
            assert res.results[0].memory == "User is learning Japanese"
            prof = await client.profile(container_tag=TAG)
            assert "User is learning Japanese" in (prof.profile.dynamic or [])
            doc = await client.documents.get(added.id)
            assert doc.id == added.id
        assert server.count("POST", "/v4/search") == 1

    def test_retry_then_success(self, server: EmulatorServer) -> None:
        client = sync_client(server, max_retries=2)
        server.fail_next(2, 503, path="/v4/search", retry_after=0.001)
        res = client.search.memories(q="allergy", container_tag=TAG)
        assert res.results[0].memory == "User has a severe peanut allergy"
        assert server.count("POST", "/v4/search") == 3

    def test_errors_raise_sdk_exceptions(self, server: EmulatorServer) -> None:
        client = sync_client(server, max_retries=1)
        server.fail_next(None, 500, path="/v4/search", retry_after=0.001)
        with pytest.raises(supermemory.InternalServerError) as info:
            client.search.memories(q="allergy")
        assert info.value.status_code == 500
        assert server.count("POST", "/v4/search") == 2  # original + 1 retry
        server.clear_faults()
        server.fail_next(1, 429, retry_after=0.001)
        with pytest.raises(supermemory.RateLimitError) as rl:
            sync_client(server).search.memories(q="allergy")
        assert rl.value.response.headers["retry-after"] == "1"
        assert rl.value.response.headers["retry-after-ms"] == "1"
        server.api_keys = frozenset({KEY})
        with pytest.raises(supermemory.AuthenticationError):
            sync_client(server, api_key=OTHER_KEY).search.memories(q="x")

    async def test_async_retry_and_rate_limit(self, server: EmulatorServer) -> None:
        server.fail_next(1, 500, retry_after=0.001)
        async with async_client(server, max_retries=1) as client:
            res = await client.search.memories(q="hiking", container_tag=TAG)
        assert res.results[0].memory.startswith("User likes hiking")
        assert server.count("POST", "/v4/search") == 2

    def test_hang_triggers_client_timeout(self, server: EmulatorServer) -> None:
        server.hang_next(1, 30.0, path="/v4/search")
        client = sync_client(server, timeout=0.3)
        with pytest.raises(supermemory.APITimeoutError):
            client.search.memories(q="allergy")
        assert server.faults.hangs == 1
        # the next request is served normally
        assert client.search.memories(q="allergy").results

    def test_error_rate_is_seeded(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        server.set_error_rate(1.0, statuses=[502], seed=3)
        with pytest.raises(supermemory.InternalServerError) as info:
            client.search.memories(q="allergy")
        assert info.value.status_code == 502
        server.set_error_rate(0.0)
        assert client.search.memories(q="allergy").results

    def test_latency_is_applied(self, server: EmulatorServer) -> None:
        server.set_latency((0.001, 0.002), seed=5)
        client = sync_client(server)
        client.search.memories(q="allergy")
        client.search.memories(q="allergy")
        assert server.latency_applied == 2
        assert server.stats()["latency"]["applied"] == 2


# ------------------------------------------------------------------------- 5.x


@v5_only
class TestV5:
    def test_search_ranks_and_parses(self, server: EmulatorServer) -> None:
        from supermemory.types import SearchResponse

        client = sync_client(server)
        res = client.search(TAG, query="allergies", include={"documents": True, "related": True})
        assert isinstance(res, SearchResponse)
        top = res.results[0]
        assert top.memory == "User has a severe peanut allergy"
        assert 0.0 < top.similarity <= 1.0
        assert top.metadata == {"kind": "health"}
        assert top.is_latest
        assert top.included is not None
        assert top.included.document is not None
        assert top.included.related is not None
        assert res.search_time >= 0
        last = server.last_request("POST", f"/ns/{TAG}/search")
        assert last is not None
        assert last.headers["authorization"] == f"Bearer {KEY}"
        # strict validation of the raw payload against the SDK model
        SearchResponse.model_validate(
            httpx.post(
                server.url(f"/ns/{TAG}/search"),
                json={"query": "allergies"},
                headers={"Authorization": f"Bearer {KEY}"},
            ).json()
        )

    def test_limit_threshold_modes_and_isolation(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        assert len(client.search(TAG, query="user", limit=2).results) == 2
        assert client.search(TAG, query="peanut hiking cats", threshold=0.99).results == []
        mine = client.search(TAG, query="allergic allergy", search_mode="memories").results
        assert [r.memory for r in mine] == ["User has a severe peanut allergy"]
        chunks = client.search(TAG, query="Berlin", search_mode="chunks").results
        assert chunks[0].chunk == "User lives in Berlin with two cats"
        assert chunks[0].memory is None
        other = sync_client(server, api_key=OTHER_KEY)
        assert other.search(TAG, query="allergy").results == []

    def test_filter(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        res = client.search(
            TAG,
            query="user",
            search_mode="memories",
            filter={"field": "kind", "operator": "eq", "value": "home"},
        )
        assert [r.memory for r in res.results] == ["User lives in Berlin with two cats"]

    def test_profile_and_buckets(self, server: EmulatorServer) -> None:
        from supermemory.types import ProfileResponse

        client = sync_client(server)
        prof = client.profile(TAG)
        assert isinstance(prof, ProfileResponse)
        assert [f.memory for f in prof.profile.static] == ["User's name is Ada Lovelace"]
        assert "User has a severe peanut allergy" in [f.memory for f in prof.profile.dynamic]
        assert [f.memory for f in prof.profile.buckets["food"]] == ["User prefers vegetarian food"]
        assert client.profiles.set_buckets(TAG, buckets={"travel": "Trips"}).buckets == {
            "travel": "Trips"
        }
        assert "travel" in client.profile(TAG).profile.buckets
        assert client.profiles.delete_buckets(TAG, buckets=["travel"]).buckets == {}

    def test_document_lifecycle(self, server: EmulatorServer) -> None:
        from supermemory.types import Document, ListResponse

        client = sync_client(server)
        ref = client.add(
            TAG,
            content="User works as a nurse. User plays the violin.",
            id="chat-1",
            metadata={"source": "chat"},
        )
        assert (ref.id, ref.status) == ("chat-1", "done")
        hit = client.search(TAG, query="violin", search_mode="memories").results[0]
        assert hit.memory == "User plays the violin."
        doc = client.documents.get(TAG, "chat-1", include=["chunks", "memories"])
        assert isinstance(doc, Document)
        assert doc.metadata == {"source": "chat"}
        assert doc.chunks is not None
        assert doc.memories is not None
        assert len(doc.memories) == 2
        # reusing the id appends new information
        client.add(TAG, content="User speaks French.", id="chat-1")
        assert client.search(TAG, query="french").results[0].memory == "User speaks French."
        listed = client.list(TAG, "documents", limit=2, include={"memoryCount": True})
        assert isinstance(listed, ListResponse)
        assert listed.pagination.total_items == 6
        assert listed.documents[0].id == "chat-1"
        assert listed.documents[0].system.memory_count == 3
        mems = client.list(TAG, "memories", limit=100)
        assert len(mems.memories) == 8
        client.documents.update(TAG, "chat-1", content="User works as a pilot.")
        assert client.search(TAG, query="violin").results == []
        deleted = client.documents.delete(TAG, ids=["chat-1", "missing"])
        assert deleted.count == 1
        assert [e.id for e in deleted.errors] == ["missing"]
        with pytest.raises(supermemory.NotFoundError):
            client.documents.get(TAG, "chat-1")

    def test_batch_and_file_upload(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        batch = client.documents.batch_add(
            "batch-ns", documents=[{"content": "User drinks green tea"}, {"content": ""}]
        )
        assert (batch.count, batch.failed) == (1, 1)
        up = client.documents.upload_file(
            "batch-ns", file=("notes.txt", b"User collects vinyl records", "text/plain")
        )
        assert up.status == "done"
        found = client.search("batch-ns", query="vinyl").results
        assert found[0].memory == "User collects vinyl records"
        client.documents.replace_with_file(
            "batch-ns", up.id, file=("notes.txt", b"User collects stamps", "text/plain")
        )
        assert client.search("batch-ns", query="vinyl").results == []

    def test_forget_and_forget_matching(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        preview = client.memories.forget_matching(TAG, query="peanut allergy", dry_run=True)
        assert [m.memory for m in preview.matches] == ["User has a severe peanut allergy"]
        assert client.search(TAG, query="peanut").results  # dry run changed nothing
        done = client.memories.forget_matching(TAG, query="peanut allergy", dry_run=False)
        assert done.count == 1
        assert client.search(TAG, query="peanut", search_mode="memories").results == []
        target = client.search(TAG, query="hiking", search_mode="memories").results[0]
        forgot = client.memories.forget(TAG, ids=[target.id, "missing"])
        assert forgot.count == 1
        assert forgot.errors[0].id == "missing"
        detail = client.memories.get(TAG, target.id)
        assert detail.is_forgotten

    def test_namespaces_and_organization(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        names = [n.namespace for n in client.namespaces.list().namespaces]
        assert names == ["other-user", TAG]
        details = client.namespaces.update(TAG, supporting_context="A test user")
        assert details.supporting_context == "A test user"
        assert client.namespaces.get(TAG).namespace == TAG
        assert client.organization.get().namespace_count == 2
        deleted = client.namespaces.delete("other-user")
        assert deleted.deleted_documents_count == 1
        assert [n.namespace for n in client.namespaces.list().namespaces] == [TAG]

    async def test_async_client(self, server: EmulatorServer) -> None:
        async with async_client(server) as client:
            await client.add(TAG, content="User is learning Japanese")
            res = await client.search(TAG, query="japanese")
            assert res.results[0].memory == "User is learning Japanese"
            prof = await client.profile(TAG)
            assert "User is learning Japanese" in [f.memory for f in prof.profile.dynamic]
        assert server.count("POST", f"/ns/{TAG}/search") == 1

    def test_errors_raise_sdk_exceptions(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        server.fail_next(1, 500)
        with pytest.raises(supermemory.InternalServerError) as info:
            client.search(TAG, query="allergy")
        assert info.value.status_code == 500
        server.fail_next(1, 429, retry_after=0)
        with pytest.raises(supermemory.RateLimitError):
            client.search(TAG, query="allergy")
        server.fail_next(1, 503)
        with pytest.raises(supermemory.APIStatusError) as unavailable:
            client.search(TAG, query="allergy")
        assert unavailable.value.status_code == 503
        assert server.count("POST", f"/ns/{TAG}/search") == 3  # max_retries=0: no retries
        server.api_keys = frozenset({KEY})
        with pytest.raises(supermemory.AuthenticationError):
            sync_client(server, api_key=OTHER_KEY).search(TAG, query="x")

    def test_retry_happens(self, server: EmulatorServer) -> None:
        # The 5.x SDK only honours integer Retry-After; 0 falls back to ~1 s backoff.
        server.fail_next(1, 503, retry_after=1)
        client = sync_client(server, max_retries=1)
        assert client.search(TAG, query="allergy").results
        assert server.count("POST", f"/ns/{TAG}/search") == 2

    async def test_async_errors(self, server: EmulatorServer) -> None:
        server.fail_next(1, 500, path=f"/ns/{TAG}/profile")
        async with async_client(server) as client:
            with pytest.raises(supermemory.InternalServerError):
                await client.profile(TAG)
            assert (await client.profile(TAG)).profile.static

    def test_hang_triggers_client_timeout(self, server: EmulatorServer) -> None:
        server.hang_next(1, 30.0, path=f"/ns/{TAG}/search")
        client = sync_client(server, timeout=0.3)
        with pytest.raises(supermemory.APITimeoutError):
            client.search(TAG, query="allergy")
        assert server.faults.hangs == 1
        assert client.search(TAG, query="allergy").results

    def test_latency_is_applied(self, server: EmulatorServer) -> None:
        server.set_latency(0.001)
        client = sync_client(server)
        client.search(TAG, query="allergy")
        assert server.latency_applied == 1
