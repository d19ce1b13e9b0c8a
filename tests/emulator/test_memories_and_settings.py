"""Memories, settings, namespaces and the organisation through the real SDK of the venv."""

from __future__ import annotations

import pytest

from wm_middleware.emulator import EmulatorServer

from ..conftest import v3_only, v5_only
from .conftest import TAG, sync_client

supermemory = pytest.importorskip("supermemory")


@v3_only
class TestV3:
    """supermemory 3.x: /v4/memories and /v3/settings."""

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


@v5_only
class TestV5:
    """supermemory 5.x: forgetting, namespaces and the organisation."""

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
