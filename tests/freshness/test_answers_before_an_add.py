"""While an add's new documents are indexed, a search or profile answers what it answered before
the add: the copy the cache held is served (no request), until a status check finds them indexed.

Through the real SDKs against the emulator's indexing pipeline, sync and async. What must still
be fetched at once: a list of documents (it shows a pending document), and any write that names
an existing document (3.x ``custom_id``, 5.x ``id``), which may change it at once.
"""

from __future__ import annotations

from typing import Any

import wm_middleware
from wm_middleware.emulator import EmulatorServer

from .conftest import Sdk, done, mentions, read_until


def _cached(sdk: Sdk, mode: str, emulator: EmulatorServer, **options: Any) -> Any:
    return wm_middleware.wrap(sdk.client(mode, emulator.base_url), **options)


async def _added_after_credits(sdk: Sdk, mode: str, emulator: EmulatorServer, delay: float) -> Any:
    """A client (settle_interval 2 s) that read three times (one fetch, two hits: credits for
    a status check), then added a fact the emulator indexes ``delay`` seconds later. What it
    fetched answers for 1.5 s: the reads right after come well within that, loaded or not."""
    emulator.set_indexing_delay(delay)
    cached = _cached(sdk, mode, emulator, settle_interval=2.0)
    for _ in range(3):
        await done(sdk.search(cached))
    await done(sdk.add(cached, "The user likes espresso"))
    return cached


async def test_a_read_right_after_an_add_is_served_what_it_answered_before(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    emulator.set_indexing_delay(3600.0)
    cached = _cached(sdk, mode, emulator, settle_interval=5.0, settle_max=10.0)
    before = await done(sdk.search(cached))
    await done(sdk.profile(cached))
    reads = sdk.reads(emulator)
    await done(sdk.add(cached, "The user likes espresso"))
    after = await done(sdk.search(cached))
    await done(sdk.profile(cached))
    # No request: an uncached client would have made two, and got the same answers.
    assert (sdk.reads(emulator), sdk.status_checks(emulator)) == (reads, 0)
    assert not mentions(after, "espresso")
    assert after == before
    assert after is not before  # the same answer, a fresh object


async def test_the_added_fact_shows_once_indexed_and_is_cached_as_usual_afterwards(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    cached = await _added_after_credits(sdk, mode, emulator, 0.3)
    reads = sdk.reads(emulator)
    assert not mentions(await done(sdk.search(cached)), "espresso")  # served, not fetched
    assert sdk.reads(emulator) == reads
    # Reads go on: a check beside them finds the document indexed and ends the settle (or the
    # copy's vouching runs out and a read fetches); what is fetched then is cached.
    await read_until(lambda: sdk.search(cached), lambda answer: mentions(answer, "espresso"))
    reads = sdk.reads(emulator)
    for _ in range(3):
        assert mentions(await done(sdk.search(cached)), "espresso")
    assert sdk.reads(emulator) <= reads + 1


async def test_an_add_that_names_an_existing_document_drops_what_it_could_change(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    emulator.set_indexing_delay(3600.0)
    cached = _cached(sdk, mode, emulator, settle_interval=5.0, settle_max=10.0)
    await done(sdk.search(cached))
    reads = sdk.reads(emulator)
    if sdk.major == "3":
        add = cached.add(content="The user likes espresso", container_tag="user-1", custom_id="c1")
    else:
        add = cached.add("user-1", content="The user likes espresso", id="doc-c1")
    await done(add)
    await done(sdk.search(cached))
    assert sdk.reads(emulator) == reads + 1  # fetched, as an uncached client does


async def test_a_list_of_documents_after_an_add_is_fetched_and_shows_it_pending(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    emulator.set_indexing_delay(3600.0)
    cached = _cached(sdk, mode, emulator, settle_interval=5.0, settle_max=10.0)

    def listing() -> Any:
        if sdk.major == "3":
            return cached.documents.list(container_tags=["user-1"])
        return cached.list("user-1", "documents", limit=10)

    await done(sdk.search(cached))
    first = await done(listing())
    ref = await done(sdk.add(cached, "The user likes espresso"))
    await done(sdk.search(cached))  # the search is served what it answered before ...
    second = await done(listing())  # ... the list is not: it shows the new document at once
    assert second != first
    assert getattr(ref, "id", None) in str(second)


async def test_what_an_add_leaves_standing_is_forgotten_with_the_memorys_entries(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    emulator.set_indexing_delay(3600.0)
    memory: wm_middleware.WorkingMemory[Any] = wm_middleware.WorkingMemory()
    cached = wm_middleware.wrap(
        sdk.client(mode, emulator.base_url), working_memory=memory, settle_interval=5.0
    )
    await done(sdk.search(cached))
    await done(sdk.add(cached, "The user likes espresso"))
    memory.clear()
    reads = sdk.reads(emulator)
    await done(sdk.search(cached))
    assert sdk.reads(emulator) == reads + 1


async def test_a_fact_added_while_the_cache_holds_answers_shows_as_soon_as_checked(
    sdk: Sdk, mode: str, emulator: EmulatorServer
) -> None:
    """Read on, as an agent does: the fact shows once indexed, whatever the copies held."""
    cached = await _added_after_credits(sdk, mode, emulator, 0.2)
    await read_until(lambda: sdk.search(cached), lambda answer: mentions(answer, "espresso"))
