"""A loopback HTTP server in front of the emulator that answers from a script first.

Conformance tests need answers the emulator does not give on demand: a 500 then a 200, a slow
answer to one request only, a body the SDK's models reject, a dropped connection. Each request
takes the next scripted :class:`Answer` (if any); with none left it is forwarded to the emulator,
so every route of both generations gets a real, valid answer by default. Every request is
recorded with its headers (``x-stainless-retry-count``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

_HOP_BY_HOP = frozenset({"connection", "content-length", "transfer-encoding", "content-encoding"})


@dataclass(frozen=True)
class Answer:
    """One scripted answer: ``status`` with ``body`` (JSON) or ``text``; or ``None`` to forward.

    ``delay`` seconds pass first; ``drop`` closes the connection without an answer.
    """

    status: int | None = None
    body: Any = None
    text: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]


class ScriptedServer:
    """``with ScriptedServer(upstream) as server: server.script(Answer(500), ...)``."""

    def __init__(self, upstream: str) -> None:
        self._upstream = httpx.Client(base_url=upstream, timeout=10)
        self._lock = threading.Lock()
        self._script: deque[Answer] = deque()
        self.seen: list[Seen] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self._upstream.close()

    def script(self, *answers: Answer) -> None:
        """Queue ``answers`` for the next requests, in order (after any still queued)."""
        with self._lock:
            self._script.extend(answers)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.seen.clear()

    def requests(self, path_part: str = "") -> list[Seen]:
        """Requests received whose path contains ``path_part``."""
        with self._lock:
            return [seen for seen in self.seen if path_part in seen.path]

    def wait_for(self, count: int, timeout: float = 20.0) -> None:
        """Block until ``count`` requests have arrived (``timeout``: a bound, not a measurement)."""
        deadline = time.monotonic() + timeout
        while len(self.requests()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} requests did not arrive in {timeout} s")
            time.sleep(0.005)

    def retry_counts(self, path_part: str = "") -> list[str | None]:
        """The ``x-stainless-retry-count`` header of each request, in order."""
        return [seen.headers.get("x-stainless-retry-count") for seen in self.requests(path_part)]

    # -- serving ---------------------------------------------------------------------------------
    def _next(self, seen: Seen) -> Answer | None:
        with self._lock:
            self.seen.append(seen)
            return self._script.popleft() if self._script else None

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Any:
        sent = {k: v for k, v in headers.items() if k not in _HOP_BY_HOP and k != "host"}
        return self._upstream.request(method, path, headers=sent, content=body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer = owner._next(Seen(self.command, self.path, headers))
                if answer is not None and answer.delay:
                    time.sleep(answer.delay)
                if answer is not None and answer.drop:
                    self.close_connection = True
                    self.connection.close()
                    return
                if answer is None or answer.status is None:
                    forwarded = owner._forward(self.command, self.path, headers, body)
                    status, payload = forwarded.status_code, forwarded.content
                    kind = forwarded.headers.get("content-type", "application/json")
                    extra: dict[str, str] = {}
                else:
                    status = answer.status
                    if answer.text is not None:
                        payload, kind = answer.text.encode(), "text/plain"
                    else:
                        payload, kind = json.dumps(answer.body or {}).encode(), "application/json"
                    extra = answer.headers
                try:
                    self.send_response(status)
                    self.send_header("content-type", kind)
                    self.send_header("content-length", str(len(payload)))
                    for name, value in extra.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up first (a timeout under test)
                    self.close_connection = True

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        return Handler
