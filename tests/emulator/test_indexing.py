"""The indexing pipeline: a write is searchable only once its document is ``done``.

Driven through the real ``supermemory`` SDK of the running venv (3.x or 5.x: run the suite in
both) against the emulator served on loopback. A document's stage is set deterministically by
placing its indexing window around the present (``queued_at`` / ``ready_at``); one test per
generation also lets a short real delay run out and checks every observation on the way.
"""

from __future__ import annotations

import time
import typing
from datetime import timedelta
from typing import Any

import httpx
import pytest

from wm_middleware.emulator import Document, Emulator, EmulatorServer
from wm_middleware.emulator.store import INDEXED, INDEXING_STAGES

from ..conftest import SDK_MAJOR, sdk_client, v3_only, v5_only

supermemory = pytest.importorskip("supermemory")

KEY = "sk-indexing"
TAG = "user-1"
FACT = "User owns a red bicycle"
QUERY = "bicycle"
LONG = 3600.0  # an indexing delay no test outlives: stages are placed, never waited for


@pytest.fixture
def server(emulator: EmulatorServer) -> EmulatorServer:
    """The clean session emulator with a long indexing delay."""
    emulator.set_indexing_delay(LONG)
    return emulator


def client(server: EmulatorServer, mode: str = "sync") -> Any:
    return sdk_client(mode, server.base_url, KEY, max_retries=0)


def at_stage(doc: Document, fraction: float) -> None:
    """Place ``doc`` ``fraction`` (0..1) of the way through its indexing window; 1 is done."""
    span = doc.ready_at - doc.queued_at
    doc.queued_at = time.monotonic() - fraction * span
    doc.ready_at = doc.queued_at + span


def stage_fractions() -> list[tuple[str, float]]:
    """Each stage name with a fraction of the window inside its slice, then ``done``."""
    n = len(INDEXING_STAGES)
    return [(name, (k + 0.5) / n) for k, name in enumerate(INDEXING_STAGES)] + [(INDEXED, 1.0)]


# ------------------------------------------------------------------ generation-agnostic


def test_the_stage_names_are_the_sdk_status_names_in_pipeline_order() -> None:
    if SDK_MAJOR == "3":
        from supermemory.types.document_get_response import DocumentGetResponse as Model

        literal = Model.model_fields["status"].annotation
    else:
        from supermemory.types.document_system_status import DocumentSystemStatus

        literal = typing.get_args(DocumentSystemStatus)[0]
    names = typing.get_args(literal)
    assert (*INDEXING_STAGES, INDEXED) == (
        "queued",
        "extracting",
        "chunking",
        "embedding",
        "indexing",
        "done",
    )
    assert set(INDEXING_STAGES) | {INDEXED} <= set(names)


def test_indexing_delay_hides_new_documents() -> None:
    em = Emulator(indexing_delay=60)
    doc = em.store.add_document(KEY, "User owns a red bicycle", container_tags=[TAG])
    assert doc.status == "queued"
    assert em.store.search_memories(KEY, "bicycle") == []
    doc.ready_at = 0
    assert em.store.search_memories(KEY, "bicycle")[0][0].memory == "User owns a red bicycle"


def test_a_document_walks_the_stages_in_equal_slices_of_the_delay() -> None:
    em = Emulator(indexing_delay=LONG)
    doc = em.store.add_document(KEY, FACT, container_tags=[TAG])
    assert doc.status == "queued"
    for name, fraction in stage_fractions():
        at_stage(doc, fraction)
        assert doc.status == name
        visible = [m.memory for m, _ in em.store.search_memories(KEY, QUERY)]
        assert visible == ([FACT] if name == INDEXED else [])


def test_no_delay_means_done_at_once_and_seeds_are_done_at_once() -> None:
    em = Emulator()
    assert em.store.add_document(KEY, FACT).status == INDEXED
    em.indexing_delay = LONG
    (seeded,) = em.seed(KEY, ["User likes tea"])
    assert em.store.search_memories(KEY, "tea")[0][0].id == seeded.id


def test_a_new_delay_applies_to_later_writes_only() -> None:
    em = Emulator(indexing_delay=LONG)
    first = em.store.add_document(KEY, FACT)
    em.set_indexing_delay(0)
    second = em.store.add_document(KEY, "User owns a green kayak")
    assert (first.status, second.status) == ("queued", INDEXED)
    assert em.indexing_delay == 0.0


@pytest.mark.parametrize("bad", [-1, -0.001, float("nan"), float("inf"), "2", True, None])
def test_a_bad_indexing_delay_is_refused_naming_the_argument(bad: Any) -> None:
    with pytest.raises(ValueError, match="indexing_delay"):
        EmulatorServer(indexing_delay=bad)
    em = Emulator()
    with pytest.raises(ValueError, match="indexing_delay"):
        em.set_indexing_delay(bad)
    assert em.indexing_delay == 0.0


def test_the_control_api_sets_the_delay_at_run_time(server: EmulatorServer) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        assert http.get("/_emulator/stats").json()["indexing"] == {"delay": LONG}
        answer = http.post("/_emulator/indexing", json={"delay": 0.25})
        assert answer.json() == {"ok": True, "delay": 0.25}
        assert server.indexing_delay == 0.25
        for body in ({"delay": -1}, {"delay": "soon"}, {"delay": True}, {}):
            refused = http.post("/_emulator/indexing", json=body)
            assert refused.status_code == 400, body
            assert refused.json()["error"] == "Invalid request"
        assert http.get("/_emulator/stats").json()["indexing"] == {"delay": 0.25}
        assert "/_emulator/indexing" in http.get("/").text


def test_serve_takes_an_indexing_delay() -> None:
    from ..demo._run import run, serving

    with serving("--indexing-delay", "2.5") as base:
        assert httpx.get(f"{base}/_emulator/stats", timeout=5).json()["indexing"] == {"delay": 2.5}
    refused = run("-m", "wm_middleware", "serve", "--indexing-delay", "-1")
    assert refused.returncode == 2
    assert "--indexing-delay: must be between 0 and 86400 s" in refused.stderr


# ------------------------------------------------------------------------------- 3.x


def _v3_found(sdk: Any) -> bool:
    memories = sdk.search.memories(q=QUERY, container_tag=TAG).results
    chunks = sdk.search.documents(q=QUERY, container_tags=[TAG]).results
    profile = sdk.profile(container_tag=TAG).profile
    seen = [bool(memories), bool(chunks), FACT in (profile.dynamic or [])]
    assert len(set(seen)) == 1, seen  # search, document search and profile agree
    return seen[0]


@v3_only
class TestV3:
    def test_search_profile_and_processing_follow_the_status(self, server: EmulatorServer) -> None:
        sdk = client(server)
        added = sdk.add(content=FACT, container_tag=TAG)
        assert added.status == "queued"
        doc = server.store.get_document(KEY, added.id)
        assert doc is not None
        for name, fraction in stage_fractions():
            at_stage(doc, fraction)
            assert sdk.documents.get(added.id).status == name
            listed = sdk.documents.list(container_tags=[TAG]).memories
            assert [(d.id, d.status) for d in listed] == [(added.id, name)]
            processing = sdk.documents.list_processing()
            in_flight = [(d.id, d.status) for d in processing.documents]
            assert in_flight == ([] if name == INDEXED else [(added.id, name)])
            assert processing.total_count == len(in_flight)
            assert _v3_found(sdk) is (name == INDEXED)

    def test_an_update_indexes_again_and_a_delete_is_at_once(self, server: EmulatorServer) -> None:
        sdk = client(server)
        server.set_indexing_delay(0)
        added = sdk.add(content="User owns a blue car", container_tag=TAG)
        assert added.status == INDEXED
        server.set_indexing_delay(LONG)
        assert sdk.documents.update(added.id, content=FACT).status == "queued"
        assert not _v3_found(sdk)
        assert sdk.search.memories(q="car", container_tag=TAG).results == []
        assert [d.id for d in sdk.documents.list_processing().documents] == [added.id]
        sdk.documents.delete(added.id)
        assert sdk.documents.list_processing().total_count == 0
        with pytest.raises(supermemory.NotFoundError):
            sdk.documents.get(added.id)

    def test_the_processing_list_views_follow_the_api(self, server: EmulatorServer) -> None:
        sdk = client(server)
        fresh = sdk.add(content=FACT, container_tag=TAG)
        stale = sdk.add(content="User owns a green kayak", container_tag=TAG)
        aged = server.store.get_document(KEY, stale.id)
        assert aged is not None
        aged.updated_at -= timedelta(hours=5)  # pending, not updated for 5 hours
        active = sdk.documents.list_processing()
        assert [d.id for d in active.documents] == [fresh.id]
        assert active.total_count == 1
        pending = sdk.documents.list_processing(view="pending")
        assert {d.id: d.stuck for d in pending.documents} == {fresh.id: False, stale.id: True}
        assert pending.pagination is None
        first = sdk.documents.list_processing(view="all", limit=1, page=1)
        assert first.pagination is not None
        assert first.pagination.total_pages == 2
        assert len(first.documents) == 1

    def test_batch_and_file_uploads_are_indexed_too(self, server: EmulatorServer) -> None:
        sdk = client(server)
        batch = sdk.documents.batch_add(documents=[FACT], container_tag=TAG)
        upload = sdk.documents.upload_file(
            file=("notes.txt", b"User collects vinyl records", "text/plain"), container_tag=TAG
        )
        assert [r.status for r in batch.results] == ["queued"]
        assert upload.status == "queued"
        assert sdk.documents.list_processing(container_tags=TAG).total_count == 2
        assert sdk.documents.list_processing(container_tags="elsewhere").total_count == 0

    async def test_a_real_delay_runs_out(self, server: EmulatorServer) -> None:
        server.set_indexing_delay(0.5)
        async with client(server, "async") as sdk:
            added = await sdk.add(content=FACT, container_tag=TAG)
            assert added.status == "queued"
            seen: list[tuple[str, bool]] = []
            deadline = time.monotonic() + 20
            while not seen or seen[-1][0] != INDEXED:
                assert time.monotonic() < deadline, seen
                hits = (await sdk.search.memories(q=QUERY, container_tag=TAG)).results
                status = (await sdk.documents.get(added.id)).status
                seen.append((status, bool(hits)))
            assert (await sdk.search.memories(q=QUERY, container_tag=TAG)).results
        assert_progress(seen)


def assert_progress(seen: list[tuple[str, bool]]) -> None:
    """Statuses only move forward and end ``done``; no search found the fact before then.

    Each observation is ``(status read after the search, whether the search found the fact)``.
    """
    order = [*INDEXING_STAGES, INDEXED]
    ranks = [order.index(status) for status, _ in seen]
    assert ranks == sorted(ranks), seen
    assert seen[-1][0] == INDEXED
    assert all(status == INDEXED for status, found in seen if found), seen


# ------------------------------------------------------------------------------- 5.x


def _v5_found(sdk: Any) -> bool:
    memories = sdk.search(TAG, query=QUERY, search_mode="memories").results
    chunks = sdk.search(TAG, query=QUERY, search_mode="chunks").results
    profile = [f.memory for f in sdk.profile(TAG).profile.dynamic]
    listed = [m.memory for m in sdk.list(TAG, "memories").memories]
    seen = [bool(memories), bool(chunks), FACT in profile, FACT in listed]
    assert len(set(seen)) == 1, seen  # search, chunk search, profile and list agree
    return seen[0]


@v5_only
class TestV5:
    def test_search_profile_and_list_follow_the_status(self, server: EmulatorServer) -> None:
        sdk = client(server)
        ref = sdk.add(TAG, content=FACT, id="doc-1")
        assert (ref.id, ref.status) == ("doc-1", "queued")
        doc = server.store.get_document(KEY, "doc-1")
        assert doc is not None
        for name, fraction in stage_fractions():
            at_stage(doc, fraction)
            got = sdk.documents.get(TAG, "doc-1")
            assert got.system.status == name
            assert got.system.dreaming_status == ("done" if name == INDEXED else "dreaming")
            listed = sdk.list(TAG, "documents").documents
            assert [(d.id, d.system.status) for d in listed] == [("doc-1", name)]
            assert _v5_found(sdk) is (name == INDEXED)

    def test_an_append_indexes_again_and_a_delete_is_at_once(self, server: EmulatorServer) -> None:
        sdk = client(server)
        server.set_indexing_delay(0)
        assert sdk.add(TAG, content="User owns a blue car", id="doc-1").status == INDEXED
        server.set_indexing_delay(LONG)
        assert sdk.add(TAG, content=FACT, id="doc-1").status == "queued"
        assert not _v5_found(sdk)
        assert sdk.documents.get(TAG, "doc-1").system.status == "queued"
        assert sdk.documents.update(TAG, "doc-1", content="User owns a kayak").status == "queued"
        assert sdk.documents.delete(TAG, ids=["doc-1"]).count == 1
        with pytest.raises(supermemory.NotFoundError):
            sdk.documents.get(TAG, "doc-1")
        assert sdk.list(TAG, "documents").documents == []

    def test_batch_and_file_uploads_are_indexed_too(self, server: EmulatorServer) -> None:
        sdk = client(server)
        batch = sdk.documents.batch_add(TAG, documents=[{"content": FACT}])
        upload = sdk.documents.upload_file(
            TAG, file=("notes.txt", b"User collects vinyl records", "text/plain")
        )
        assert [r.status for r in batch.results] == ["queued"]
        assert upload.status == "queued"
        statuses = [d.system.status for d in sdk.list(TAG, "documents").documents]
        assert statuses == ["queued", "queued"]

    async def test_a_real_delay_runs_out(self, server: EmulatorServer) -> None:
        server.set_indexing_delay(0.5)
        sdk = client(server, "async")
        ref = await sdk.add(TAG, content=FACT)
        assert ref.status == "queued"
        seen: list[tuple[str, bool]] = []
        deadline = time.monotonic() + 20
        while not seen or seen[-1][0] != INDEXED:
            assert time.monotonic() < deadline, seen
            hits = (await sdk.search(TAG, query=QUERY, search_mode="memories")).results
            status = (await sdk.documents.get(TAG, ref.id)).system.status
            seen.append((status, bool(hits)))
        assert (await sdk.search(TAG, query=QUERY, search_mode="memories")).results
        assert_progress(seen)
