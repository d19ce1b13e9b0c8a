"""Loopback OTLP receivers for tests: HTTP/protobuf (``http.server``) and gRPC.

What arrives is decoded with opentelemetry-proto into :class:`Received`: span names with their
attributes, metrics by name, resource attributes, the paths (or gRPC services) called, and the raw
bytes (to check that something was never exported).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from ._loopback_http import QuietHandler, serving


@dataclass
class Received:
    spans: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, list[Any]] = field(default_factory=dict)  # name -> [(metric, resource)]
    resources: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    raw: bytes = b""
    # every exported metric with its resource's attributes, in arrival order
    resource_metrics: list[tuple[dict[str, Any], Any]] = field(default_factory=list)
    # the receiver's threads record one export at a time
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def arrived(self, path: str, raw: bytes, signal: _Signal | None, request: Any) -> None:
        """One export request at ``path``: its bytes, and what it holds if ``signal`` is known."""
        with self._lock:
            self.paths.append(path)
            self.raw += raw
            if signal is not None:
                signal.take(self, request)


def value_of(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes_of(items: list[KeyValue] | Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in items}


def _take_traces(got: Received, request: ExportTraceServiceRequest) -> None:
    for resource_spans in request.resource_spans:
        got.resources.append(attributes_of(resource_spans.resource.attributes))
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                got.spans.append({"name": span.name, **attributes_of(span.attributes)})


def _take_metrics(got: Received, request: ExportMetricsServiceRequest) -> None:
    for resource_metrics in request.resource_metrics:
        resource = attributes_of(resource_metrics.resource.attributes)
        got.resources.append(resource)
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                got.metrics.setdefault(metric.name, []).append(metric)
                got.resource_metrics.append((resource, metric))


@dataclass(frozen=True)
class _Signal:
    """One OTLP signal: its export request and response messages, and how it is recorded."""

    request: Any
    response: Any
    take: Callable[[Received, Any], None]


_TRACES = _Signal(ExportTraceServiceRequest, ExportTraceServiceResponse, _take_traces)
_METRICS = _Signal(ExportMetricsServiceRequest, ExportMetricsServiceResponse, _take_metrics)
_HTTP_PATHS = {"/v1/traces": _TRACES, "/v1/metrics": _METRICS}


@contextmanager
def http_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver on 127.0.0.1: (its base URL, what it received)."""
    got = Received()

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            signal = _HTTP_PATHS.get(self.path)
            request = signal.request.FromString(body) if signal else None
            got.arrived(self.path, body, signal, request)
            if signal is None:
                self.reply(404)
            else:
                answer = signal.response().SerializeToString()
                self.reply(200, answer, "application/x-protobuf")

    with serving(Handler) as port:
        yield f"http://127.0.0.1:{port}", got


@contextmanager
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC receiver: the trace and metrics services of opentelemetry-proto."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    got = Received()

    def servicer(base: type, signal: _Signal, path: str) -> Any:
        class Servicer(base):  # type: ignore[misc, valid-type]
            def Export(self, request: Any, context: Any) -> Any:
                got.arrived(path, request.SerializeToString(), signal, request)
                return signal.response()

        return Servicer()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
        servicer(trace_service_pb2_grpc.TraceServiceServicer, _TRACES, "grpc traces"), server
    )
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
        servicer(metrics_service_pb2_grpc.MetricsServiceServicer, _METRICS, "grpc metrics"), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"http://127.0.0.1:{port}", got
    server.stop(grace=None)
