"""Loopback OTLP receivers for tests: HTTP/protobuf (``http.server``) and gRPC.

What arrives is decoded with opentelemetry-proto into :class:`Received`: span names with their
attributes, metrics by name, resource attributes, the paths (or gRPC services) called, and the raw
bytes (to check that something was never exported).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


@dataclass
class Received:
    spans: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, list[Any]] = field(default_factory=dict)  # name -> [(metric, resource)]
    resources: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    raw: bytes = b""
    # every exported metric with its resource's attributes, in arrival order
    resource_metrics: list[tuple[dict[str, Any], Any]] = field(default_factory=list)


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


class _Receiver(ThreadingHTTPServer):
    received: Received
    lock: threading.Lock


class _Handler(BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        got = self.server.received
        with self.server.lock:
            got.paths.append(self.path)
            got.raw += body
            if self.path == "/v1/traces":
                _take_traces(got, ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                _take_metrics(got, ExportMetricsServiceRequest.FromString(body))
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_response(404)
                self.end_headers()
                return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def http_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP receiver on 127.0.0.1: (its base URL, what it received)."""
    server = _Receiver(("127.0.0.1", 0), _Handler)
    server.received = Received()
    server.lock = threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server.received
    server.shutdown()
    server.server_close()
    thread.join(10)


@contextmanager
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC receiver: the trace and metrics services of opentelemetry-proto."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    got = Received()
    lock = threading.Lock()

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            with lock:
                got.paths.append("grpc traces")
                got.raw += request.SerializeToString()
                _take_traces(got, request)
            return ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            with lock:
                got.paths.append("grpc metrics")
                got.raw += request.SerializeToString()
                _take_metrics(got, request)
            return ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"http://127.0.0.1:{port}", got
    server.stop(grace=None)
