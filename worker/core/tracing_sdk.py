"""The OpenTelemetry SDK set up from the standard `OTEL_*` variables: imported only when tracing is on.

Exporters by `OTEL_TRACES_EXPORTER` (a comma-separated list, `otlp` when unset): `otlp` sends
OTLP over HTTP (protobuf) to `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`
(default http://localhost:4318), `console` prints spans. The sampler (`OTEL_TRACES_SAMPLER`), the
resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`) and the batch processor's limits
(`OTEL_BSP_*`) are read by the SDK itself. Spans still queued are exported when the process exits.
"""

from __future__ import annotations

import logging
import os

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

log = logging.getLogger(__name__)

_GRPC = "grpc"


def _exporter(name: str) -> SpanExporter | None:
    if name == "otlp":
        protocol = (
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf"
        )
        if protocol.strip().lower() == _GRPC:
            log.warning("tracing: OTLP over gRPC is not shipped; sending OTLP over HTTP (protobuf) instead")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if name == "console":
        return ConsoleSpanExporter()
    log.warning("tracing: unknown OTEL_TRACES_EXPORTER %r (known: otlp, console); ignored", name)
    return None


def provider_from_env(service: str) -> TracerProvider | None:
    """A tracer provider exporting where `OTEL_TRACES_EXPORTER` says; None when it names no usable exporter."""
    names = [
        n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()
    ]
    exporters = [e for e in (_exporter(n) for n in names or ["otlp"] if n != "none") if e is not None]
    if not exporters:
        return None
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        # Neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES named the service: the process says what it is.
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider
