"""A Supermemory-compatible API emulator for tests, demos and ``wm-middleware serve``.

It is a real HTTP server (Starlette on uvicorn; install the ``demo`` extra) that the
real ``supermemory`` SDKs can target with ``base_url``:

* 3.x (Stainless) paths: ``/v3/...``/``/v4/...`` (search, profile, documents,
  memories, settings);
* 5.x (Fern) paths: ``/ns/{namespace}/...`` (search, profile, list, documents,
  memories, profile buckets, namespaces) plus ``/organization``, ``/feedback``.

Data lives in memory, scoped by API key (``Authorization: Bearer``) and by container
tag (= 5.x namespace). Latency, fault injection and request counting are controlled
from Python or over HTTP under ``/_emulator``. This package never imports the SDK.

Quick start::

    from wm_middleware.emulator import EmulatorServer

    with EmulatorServer(seed=7) as server:
        server.seed("sk-test", ["User has a severe peanut allergy"], container_tag="user-1")
        ...  # supermemory.Supermemory(api_key="sk-test", base_url=server.base_url)
        assert server.count("POST", "/v4/search") == 1
"""

from __future__ import annotations

from .app import create_app
from .core import Emulator
from .faults import FaultDecision, FaultInjector, FaultRule
from .latency import LatencyModel, LatencySpec
from .request_log import RecordedRequest, RequestLog
from .server import EmulatorServer, serve, supermemory_target
from .store import DEFAULT_CONTAINER_TAG, Chunk, Document, MemoryEntry, MemoryStore, SeedMemory

__all__ = [
    "DEFAULT_CONTAINER_TAG",
    "Chunk",
    "Document",
    "Emulator",
    "EmulatorServer",
    "FaultDecision",
    "FaultInjector",
    "FaultRule",
    "LatencyModel",
    "LatencySpec",
    "MemoryEntry",
    "MemoryStore",
    "RecordedRequest",
    "RequestLog",
    "SeedMemory",
    "create_app",
    "serve",
    "supermemory_target",
]
