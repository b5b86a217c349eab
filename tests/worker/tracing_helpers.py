"""Helpers of the trace tests: an in-memory tracer provider, and an OTLP/HTTP collector in the test process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from worker.core import tracing


@dataclass(frozen=True)
class Span:
    """One finished span, whichever process made it: ids as hex, attributes as plain values."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    links: tuple[str, ...]  # the span ids linked to
    error: bool


@contextmanager
def in_memory_tracing() -> Iterator[InMemorySpanExporter]:
    """This process traces into an in-memory exporter for the block."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)
        provider.shutdown()


def from_sdk(exporter: InMemorySpanExporter) -> list[Span]:
    """The exporter's finished spans."""
    found = []
    for s in exporter.get_finished_spans():
        context = s.get_span_context()
        assert context is not None
        found.append(
            Span(
                s.name,
                f"{context.trace_id:032x}",
                f"{context.span_id:016x}",
                f"{s.parent.span_id:016x}" if s.parent is not None else None,
                dict(s.attributes or {}),
                tuple(f"{link.context.span_id:016x}" for link in s.links),
                not s.status.is_ok,
            )
        )
    return found


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Collector:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (protobuf, as the exporter sends): the spans it was sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.add(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add(self, request: ExportTraceServiceRequest) -> None:
        """Keep every span of an export request."""
        with self.lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for s in scope.spans:
                        self.spans.append(
                            Span(
                                s.name,
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex() or None,
                                {a.key: _value(a.value) for a in s.attributes},
                                tuple(link.span_id.hex() for link in s.links),
                                s.status.code == 2,
                            )
                        )

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def by_name(spans: list[Span], name: str) -> list[Span]:
    """The spans of one name."""
    return [s for s in spans if s.name == name]
