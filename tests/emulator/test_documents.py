"""Documents through the real SDK of the venv (3.x or 5.x): add, batch, files, get, list, delete."""

from __future__ import annotations

import pytest

from wm_middleware.emulator import EmulatorServer

from ..conftest import v3_only, v5_only
from .conftest import TAG, sync_client

supermemory = pytest.importorskip("supermemory")


@v3_only
class TestV3:
    """supermemory 3.x: /v3/documents...."""

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


@v5_only
class TestV5:
    """supermemory 5.x: /ns/{ns}/document... and lists."""

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
