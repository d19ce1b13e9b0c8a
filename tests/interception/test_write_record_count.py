"""Batch and bulk writes carry ``gen_ai.memory.record.count``: the records their request attempts.

The count comes from the request body (the list of documents or ids), through the real SDK of the
installed generation (3.x or 5.x, sync and async) and through a plain httpx client, against the
emulator. A single-record write counts one; a bulk delete that names no records (3.x
``delete_bulk`` by container tag) deletes an unknown number and leaves the count out. Every
write also carries the route table's semconv operation and, when it targets one record, its id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import wm_middleware
from wm_middleware import CachingTransport, WorkingMemory
from wm_middleware._runtime import Runtime
from wm_middleware._telemetry import Telemetry
from wm_middleware.emulator import EmulatorServer

from .conftest import KEY, TAG, Generation, done

COUNT = "gen_ai.memory.record.count"
CONTENTS = ["User likes green tea", "User drinks coffee", "User bikes to work"]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """``instrument()`` exporting to memory; the exporter of its finished spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    wm_middleware.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        wm_middleware.uninstrument()
        provider.shutdown()


def _writes(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name != "search_memory"]


def _count(span: ReadableSpan) -> Any:
    return (span.attributes or {}).get(COUNT)


async def _batch_add(generation: Generation, client: Any) -> list[str]:
    """Add ``CONTENTS`` in one batch call; the ids of the documents it made."""
    if generation.major == "3":
        added = await done(client.documents.batch_add(documents=CONTENTS, container_tag=TAG))
    else:
        documents = [{"content": content} for content in CONTENTS]
        added = await done(client.documents.batch_add(TAG, documents=documents))
    return [result.id for result in added.results]


async def test_a_batch_add_counts_the_documents_in_its_body(
    emulator: EmulatorServer, spans: InMemorySpanExporter, generation: Generation, mode: str
) -> None:
    client = generation.client(mode, emulator.base_url)

    ids = await _batch_add(generation, client)

    (write,) = _writes(spans)
    assert len(ids) == len(CONTENTS)
    assert (write.name, _count(write)) == ("upsert_memory", len(CONTENTS))
    assert (write.attributes or {})["supermemory.operation"] == "documents.batch_add"


async def test_a_bulk_delete_counts_the_ids_in_its_body(
    emulator: EmulatorServer, spans: InMemorySpanExporter, generation: Generation, mode: str
) -> None:
    client = generation.client(mode, emulator.base_url)
    ids = await _batch_add(generation, client)

    if generation.major == "3":
        await done(client.documents.delete_bulk(ids=ids[:2]))
    else:
        await done(client.documents.delete(TAG, ids=ids[:2]))

    delete = _writes(spans)[-1]
    assert (delete.name, _count(delete)) == ("delete_memory", 2)


async def test_a_single_record_write_counts_one(
    emulator: EmulatorServer, spans: InMemorySpanExporter, generation: Generation, mode: str
) -> None:
    await done(generation.add(generation.client(mode, emulator.base_url)))

    (write,) = _writes(spans)
    assert (write.name, _count(write)) == ("upsert_memory", 1)


async def test_a_bulk_delete_by_container_tag_leaves_the_count_out(
    emulator: EmulatorServer,
    spans: InMemorySpanExporter,
    generation: Generation,
    mode: str,
) -> None:
    if generation.major != "3":
        pytest.skip("only 3.x deletes in bulk by container tag")
    client = generation.client(mode, emulator.base_url)
    await _batch_add(generation, client)

    await done(client.documents.delete_bulk(container_tags=[TAG]))

    delete = _writes(spans)[-1]
    assert delete.name == "delete_memory"
    assert COUNT not in (delete.attributes or {})


async def test_forgetting_memories_by_id_counts_the_ids(
    emulator: EmulatorServer,
    spans: InMemorySpanExporter,
    generation: Generation,
    mode: str,
) -> None:
    if generation.major != "5":
        pytest.skip("5.x forgets memories by a list of ids")
    seeded = emulator.seed(KEY, CONTENTS, container_tag=TAG)

    await done(
        generation.client(mode, emulator.base_url).memories.forget(TAG, ids=[m.id for m in seeded])
    )

    (forget,) = _writes(spans)
    assert (forget.name, _count(forget)) == ("delete_memory", len(CONTENTS))


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("/v3/documents/batch", {"documents": CONTENTS, "containerTag": TAG}, len(CONTENTS)),
        (f"/ns/{TAG}/document/batch", {"documents": [{"content": c} for c in CONTENTS]}, 3),
        ("/v3/documents", {"content": CONTENTS[0], "containerTag": TAG}, 1),
    ],
    ids=["3.x-batch", "5.x-batch", "3.x-single"],
)
def test_the_httpx_transport_counts_the_records_its_request_body_shows(
    emulator: EmulatorServer, path: str, body: dict[str, Any], expected: int
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = Runtime(WorkingMemory(), Telemetry(provider))
    with httpx.Client(
        base_url=emulator.base_url,
        headers={"Authorization": f"Bearer {KEY}"},
        transport=CachingTransport(runtime=runtime),
    ) as client:
        client.post(path, json=body).raise_for_status()

    (write,) = exporter.get_finished_spans()
    assert (write.name, _count(write)) == ("upsert_memory", expected)


# -- the route table's facts reach every Write: semconv operation and target record -------------
class _Recording(Runtime):
    """A runtime that keeps every :class:`Write` the adapters hand it."""

    def __init__(self) -> None:
        super().__init__(WorkingMemory(), Telemetry())
        self.writes: list[Any] = []

    def write(self, write: Any, call: Any) -> Any:
        self.writes.append(write)
        return super().write(write, call)

    async def awrite(self, write: Any, call: Any) -> Any:
        self.writes.append(write)
        return await super().awrite(write, call)


async def test_sdk_writes_name_their_semconv_operation_and_target_record(
    emulator: EmulatorServer, generation: Generation, mode: str
) -> None:
    import importlib

    from .conftest import make_client

    adapter = importlib.import_module(f"wm_middleware._adapters.sdk{generation.major}")
    runtime = _Recording()
    client = adapter.wrap(make_client(mode, emulator.base_url), runtime)
    added = await done(generation.add(client))
    if generation.major == "3":
        await done(client.documents.update(added.id, content="User now prefers tea"))
        await done(client.documents.delete(added.id))
    else:
        await done(client.documents.update(TAG, added.id, content="User now prefers tea"))
        await done(client.documents.delete(TAG, ids=[added.id]))
    facts = [(w.operation_name, w.record_id, w.records) for w in runtime.writes]
    deleted = (added.id, 1)  # 5.x deletes by a list of ids: a list of one names its record
    assert facts == [
        ("upsert_memory", None, 1),
        ("update_memory", added.id, 1),
        ("delete_memory", *deleted),
    ]


def test_httpx_writes_name_their_semconv_operation_and_target_record(
    emulator: EmulatorServer,
) -> None:
    runtime = _Recording()
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(
        base_url=emulator.base_url, headers=headers, transport=CachingTransport(runtime=runtime)
    ) as client:
        added = client.post("/v3/documents", json={"content": "x", "containerTag": TAG}).json()
        client.patch(f"/v3/documents/{added['id']}", json={"content": "y"})
        client.request("DELETE", "/v4/memories", json={"id": "mem-1", "containerTag": TAG})
    facts = [(w.operation_name, w.record_id) for w in runtime.writes]
    assert facts == [
        ("upsert_memory", None),
        ("update_memory", added["id"]),
        ("delete_memory", "mem-1"),
    ]
