"""Search and profile through the real SDK of the venv (3.x or 5.x): ranking, scope, filters."""

from __future__ import annotations

import httpx
import pytest

from wm_middleware.emulator import EmulatorServer

from ..conftest import v3_only, v5_only
from .conftest import KEY, OTHER_KEY, TAG, async_client, sync_client

supermemory = pytest.importorskip("supermemory")


@v3_only
class TestV3:
    """supermemory 3.x: /v4/search, /v3/search, /v4/profile."""

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


@v5_only
class TestV5:
    """supermemory 5.x: /ns/{ns}/search and /ns/{ns}/profile."""

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

    async def test_async_client(self, server: EmulatorServer) -> None:
        async with async_client(server) as client:
            await client.add(TAG, content="User is learning Japanese")
            res = await client.search(TAG, query="japanese")
            assert res.results[0].memory == "User is learning Japanese"
            prof = await client.profile(TAG)
            assert "User is learning Japanese" in [f.memory for f in prof.profile.dynamic]
        assert server.count("POST", f"/ns/{TAG}/search") == 1
