"""Status checks are the writing client's own requests: through its ``http_client`` (transport,
proxy, TLS, resolver), within its timeout, never retried; the 3.x list asks for every pending
document. Every test runs under the SDK generation of its venv (3.x and 5.x), sync and async.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from fnmatch import fnmatch
from typing import Any

import httpx
import pytest

from wm_middleware.emulator import EmulatorServer

from ..conftest import until
from .conftest import KEY, Observed, Sdk, done, read_until

INVALID = "http://memory.invalid"  # resolves nowhere: only the client's own transport gets there


class _Routed:
    """What a custom transport does (a proxy, a resolver): sends every request to the emulator,
    whatever host its URL names, and counts what it sent."""

    def __init__(self, emulator: EmulatorServer) -> None:
        self.target = httpx.URL(emulator.base_url)
        self.sent: Counter[tuple[str, str]] = Counter()

    def routed(self, request: httpx.Request) -> httpx.Request:
        self.sent[(request.method, request.url.path)] += 1
        url = request.url.copy_with(
            scheme=self.target.scheme, host=self.target.host, port=self.target.port
        )
        return httpx.Request(
            request.method,
            url,
            headers=request.headers,
            content=request.content,
            extensions=request.extensions,
        )

    def gets(self) -> int:
        return sum(n for (method, _), n in self.sent.items() if method == "GET")


class _Sync(_Routed, httpx.BaseTransport):
    def __init__(self, emulator: EmulatorServer) -> None:
        super().__init__(emulator)
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.inner.handle_request(self.routed(request))


class _Async(_Routed, httpx.AsyncBaseTransport):
    def __init__(self, emulator: EmulatorServer) -> None:
        super().__init__(emulator)
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(self.routed(request))


def _client(mode: str, base_url: str, transport: _Routed | None = None, **options: Any) -> Any:
    """The installed SDK's client; with ``transport``, given as its own ``http_client``."""
    import supermemory

    if transport is not None:
        http = httpx.AsyncClient if mode == "async" else httpx.Client
        options["http_client"] = http(transport=transport)  # type: ignore[arg-type]
    cls = supermemory.AsyncSupermemory if mode == "async" else supermemory.Supermemory
    return cls(api_key=KEY, base_url=base_url, **options)


async def _checked(sdk: Sdk, cached: Any, observed: Observed, content: str) -> None:
    """Reads (credits for a check), an add, then reads until a status check has been made."""
    for _ in range(3):
        await done(sdk.search(cached))
    await done(sdk.add(cached, content))
    await read_until(lambda: sdk.search(cached), lambda _: observed.status_checks() >= 1)


def _check_spans(observed: Observed) -> list[Any]:
    return [s for s in observed.spans.get_finished_spans() if s.name == "wm.freshness.status_check"]


async def test_a_status_check_goes_through_the_clients_own_http_client(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed
) -> None:
    emulator.set_indexing_delay(3600.0)
    routed = _Async(emulator) if mode == "async" else _Sync(emulator)
    client = _client(mode, INVALID, routed, max_retries=0)
    cached = observed.wrap(client, settle_interval=0.2)
    await _checked(sdk, cached, observed, "The user likes espresso")
    # Every check reached the emulator, through the client's transport (the URL it names
    # resolves nowhere), and was answered (a check still in flight is waited for).
    await until(
        lambda: sdk.status_checks(emulator) == routed.gets() == observed.status_checks(), limit=20.0
    )
    assert observed.status_checks("ok") == observed.status_checks() >= 1
    assert observed.pending() == 1  # ... that the document is still pending


async def test_a_status_check_gives_up_within_the_callers_timeout(
    sdk: Sdk, mode: str, observed: Observed
) -> None:
    # An emulator of its own: a check another test started may still reach a shared one.
    with EmulatorServer(seed=7) as emulator:
        emulator.set_indexing_delay(3600.0)
        path = "/v3/documents/processing" if sdk.major == "3" else "/ns/*/document/*"
        # A status endpoint that answers after 3 s: after the caller's 0.5 s, before the 5 s a
        # check may take at most (settle_interval 3 s): answered, the check would count "ok".
        emulator.hang_next(1, 3.0, path=path, method="GET")
        client = _client(mode, emulator.base_url, timeout=0.5, max_retries=0)
        cached = observed.wrap(client, settle_interval=3.0, settle_max=60.0)
        await _checked(sdk, cached, observed, "The user likes espresso")
        # One request a check, none retried (a later check still in flight is waited for) ...
        await until(lambda: emulator.count("GET", path) == observed.status_checks(), limit=20.0)
        # ... and the first, which met the hang, gave up at the caller's timeout.
        first = min(_check_spans(observed), key=lambda span: span.start_time)
        assert first.attributes["wm.freshness.outcome"] == "error"
        assert "Timeout" in str(first.attributes["error.type"])


async def test_the_processing_list_is_asked_for_every_pending_document(
    sdk: Sdk, mode: str, emulator: EmulatorServer, observed: Observed
) -> None:
    if sdk.major != "3":
        pytest.skip("3.x asks the processing list; 5.x asks a document")
    emulator.set_indexing_delay(3600.0)
    cached = observed.wrap(_client(mode, emulator.base_url, max_retries=0), settle_interval=0.2)
    for _ in range(3):
        await done(sdk.search(cached))
    added = await done(sdk.add(cached, "The user likes espresso"))
    document = emulator.store.get_document(KEY, added.id)
    assert document is not None
    # Not updated for 5 hours and still pending (a long video, a stuck pipeline): the default
    # ``active`` view leaves it out, though search does not show it yet.
    document.updated_at -= timedelta(hours=5)
    await read_until(lambda: sdk.search(cached), lambda _: observed.status_checks() >= 1)
    asked = [r for r in emulator.requests if r.path == "/v3/documents/processing"]
    assert asked
    assert all(r.query.get("view") == ["pending"] for r in asked)
    assert observed.pending() == 1  # still followed: no check took it for finished


# -- one check, made by hand through what an adapter holds of the writing client ----------------
class _Nothing:
    def pending(self) -> int:  # the pending gauge's source (held weakly: a bound method)
        return 0


_NOTHING = _Nothing()


def _status_checks(observed: Observed) -> Any:
    from wm_middleware._freshness.checks import StatusChecks
    from wm_middleware._telemetry import Telemetry

    telemetry = Telemetry(observed.tracer_provider, observed.meter_provider)
    return StatusChecks(telemetry, _NOTHING.pending, 5.0)


def _via(client: httpx.Client | httpx.AsyncClient, emulator: EmulatorServer) -> Any:
    from wm_middleware._adapters.httpx_transport import _ViaClient

    headers = {"authorization": f"Bearer {KEY}"}
    return _ViaClient(client, isinstance(client, httpx.AsyncClient), INVALID, headers, None)


PROCESSING = ("/v3/documents/processing", "documents.list_processing")


async def test_an_async_clients_check_is_awaited_on_its_loop(
    emulator: EmulatorServer, observed: Observed
) -> None:
    routed = _Async(emulator)
    async with httpx.AsyncClient(transport=routed) as client:
        via = _via(client, emulator)
        found = await _status_checks(observed).aget(via, INVALID, *PROCESSING)
    assert found == {"documents": [], "totalCount": 0}
    assert routed.gets() == emulator.count("GET", PROCESSING[0]) == 1


async def test_an_async_clients_check_from_a_plain_thread_is_made_on_its_loop(
    emulator: EmulatorServer, observed: Observed
) -> None:
    # Where a scheduler runs a check in an executor thread: the request still goes through
    # the async client, on the loop it belongs to (the thread waits within the timeout).
    import asyncio

    routed = _Async(emulator)
    checks = _status_checks(observed)
    async with httpx.AsyncClient(transport=routed) as client:
        via = _via(client, emulator)
        found = await asyncio.get_running_loop().run_in_executor(
            None, lambda: checks.get(via, INVALID, *PROCESSING)
        )
    assert found == {"documents": [], "totalCount": 0}
    assert routed.gets() == 1
    assert observed.status_checks("ok") == 1


class _Counted(ThreadPoolExecutor):
    """A loop's default executor that knows how many of its threads are running a job."""

    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self.busy = 0
        self._lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        def counted() -> Any:
            with self._lock:
                self.busy += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.busy -= 1

        return super().submit(counted)


class _Watched(_Async):
    """Notes, for each status request, the thread it is handled in and the executor's busy
    threads at that moment."""

    def __init__(self, emulator: EmulatorServer, sdk: Sdk, executor: _Counted) -> None:
        super().__init__(emulator)
        self.status = sdk.status_paths
        self.executor = executor
        self.seen: list[tuple[int, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "GET" and any(fnmatch(path, p) for p in self.status):
            self.seen.append((threading.get_ident(), self.executor.busy))
        return await super().handle_async_request(request)


async def test_an_async_reads_check_holds_no_executor_thread(
    sdk: Sdk, emulator: EmulatorServer, observed: Observed
) -> None:
    import asyncio

    emulator.set_indexing_delay(3600.0)
    executor = _Counted()
    asyncio.get_running_loop().set_default_executor(executor)
    watched = _Watched(emulator, sdk, executor)
    client = _client("async", INVALID, watched, max_retries=0)
    cached = observed.wrap(client, settle_interval=0.2)
    await _checked(sdk, cached, observed, "The user likes espresso")
    await until(lambda: observed.status_checks() == len(watched.seen) >= 1, limit=20.0)
    # Every check's request was made on the caller's loop, and no executor thread waited on it.
    assert set(watched.seen) == {(threading.get_ident(), 0)}, watched.seen


async def test_an_async_reads_check_through_a_shared_tier_holds_no_executor_thread(
    sdk: Sdk, emulator: EmulatorServer, observed: Observed
) -> None:
    # With a shared tier the fleet's round (its lease, its stored answer) runs in a worker
    # thread; the request in it still goes back to the caller's loop.
    import asyncio

    from tests.shared.servers import Server, server_binary
    from wm_middleware import RedisTier

    if server_binary() is None:
        pytest.skip("needs valkey-server")
    emulator.set_indexing_delay(3600.0)
    executor = _Counted()
    asyncio.get_running_loop().set_default_executor(executor)
    watched = _Watched(emulator, sdk, executor)
    server = Server().start()
    try:
        with RedisTier(server.url, namespace="async-round", op_timeout=5.0) as tier:
            client = _client("async", INVALID, watched, max_retries=0)
            cached = observed.wrap(client, settle_interval=0.2, shared=tier)
            await _checked(sdk, cached, observed, "The user likes espresso")
            await until(lambda: observed.status_checks("ok") == len(watched.seen) >= 1, limit=20.0)
    finally:
        server.close()
    assert set(watched.seen) == {(threading.get_ident(), 0)}, watched.seen


def test_no_check_is_made_through_a_closed_client(
    emulator: EmulatorServer, observed: Observed
) -> None:
    routed = _Sync(emulator)
    client = httpx.Client(transport=routed)
    via = _via(client, emulator)
    client.close()
    assert _status_checks(observed).get(via, INVALID, *PROCESSING) is None
    assert routed.gets() == emulator.count("GET", PROCESSING[0]) == 0
    assert observed.status_checks() == 0  # no request: nothing counted
