"""OpenTelemetry traces, when asked for: spans through the OpenTelemetry API, nothing at all otherwise.

Mailroom's own processes (the worker, the inbox, the bounce receiver) trace when the environment says
so the standard way (`OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`, or `MAILROOM_TRACING=true`;
`OTEL_SDK_DISABLED=true` or `MAILROOM_TRACING=false` wins): `configure` then installs the SDK (the
`[otel]` extra) with an OTLP/HTTP exporter that reads every other `OTEL_*` variable itself.

An application that enqueues through `import mailroom` keeps its own tracer provider: when it has
imported OpenTelemetry, the enqueue is a span of its trace and the email stores that span's context.
Otherwise nothing is imported: `span` returns a shared no-op and `current_context` returns None, so
tracing that is off costs a dictionary lookup.

Attributes never carry an address (nor an SMTP reply's text, which may quote one): ids, codes, kinds.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

log = logging.getLogger(__name__)

# What a span attribute may be (the API's AttributeValue, without importing it).
Attributes = Mapping[str, str | bool | int | float]

# What `span` returns when tracing is off (also for callers that choose between a span and nothing).
NOOP: AbstractContextManager[None] = nullcontext(None)
_TRACE_API = "opentelemetry.trace"
# A W3C traceparent as Mailroom stores it (version 00, lower-case hex): the database checks the same.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_MAX_TRACESTATE = 512

# The tracer of this process when `configure` (or `use_provider`) turned tracing on.
_tracer: Any = None
# The email a task is delivering, and its correlation id: log lines carry them (see `log_fields`).
_email: ContextVar[tuple[int, str | None] | None] = ContextVar("mailroom_email", default=None)


def _flag(name: str) -> bool | None:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    return None


def wanted() -> bool:
    """Whether the environment asks this process to trace (see the module's docstring)."""
    if _flag("OTEL_SDK_DISABLED"):
        return False
    explicit = _flag("MAILROOM_TRACING")
    if explicit is not None:
        return explicit
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure(service: str = "mailroom") -> bool:
    """Turn tracing on for this process if the environment asks for it; whether it is on.

    Idempotent. Without the SDK installed, a warning says how to get it and tracing stays off: the
    work itself never depends on traces."""
    if _tracer is not None:
        return True
    if not wanted():
        return False
    try:
        from worker.core.tracing_sdk import provider_from_env
    except ImportError as exc:
        log.warning(
            "tracing asked for but OpenTelemetry is not installed (%s): pip install 'mailroom-pg[otel]'", exc
        )
        return False
    provider = provider_from_env(service)
    if provider is None:
        return False
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    use_provider(provider)
    return True


def use_provider(provider: Any) -> None:
    """Trace into this tracer provider (an SDK `TracerProvider`); None turns this process's tracing off."""
    global _tracer
    _tracer = None if provider is None else provider.get_tracer("mailroom")


def active() -> bool:
    """Whether spans would be made here: this process traces, or the application has OpenTelemetry."""
    return _tracer is not None or _TRACE_API in sys.modules


def _current_tracer() -> Any:
    if _tracer is not None:
        return _tracer
    api = sys.modules.get(_TRACE_API)
    # An application's process: spans only inside its own trace, with its own provider. Outside one
    # (or with OpenTelemetry imported and never set up) nothing is made, at the cost of one lookup.
    if api is None or not api.get_current_span().get_span_context().is_valid:
        return None
    return api.get_tracer("mailroom")


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    parent: Any = None,
    links: Sequence[Any] = (),
    kind: str = "internal",
) -> AbstractContextManager[Any]:
    """A span made current for the block (the span, or None when tracing is off).

    `parent` is a context from `parent_from` (None: the current span's); `kind` a SpanKind's name
    in lower case (internal, client, server, producer, consumer)."""
    tracer = _current_tracer()
    if tracer is None:
        return NOOP
    return _span(tracer, name, attributes, parent, links, kind)


@contextmanager
def _span(
    tracer: Any, name: str, attributes: Attributes | None, parent: Any, links: Sequence[Any], kind: str
) -> Iterator[Any]:
    from opentelemetry.trace import SpanKind

    # Not the SDK's record_exception: an exception's message may quote an address. Its type says enough.
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind[kind.upper()],
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            failed(current, f"{type(exc).__name__}")
            raise


def note(span_: Any, attributes: Attributes) -> None:
    """Add attributes to a span from `span` (nothing when tracing is off)."""
    if span_ is not None:
        span_.set_attributes(attributes)


def failed(span_: Any, reason: str) -> None:
    """Mark a span from `span` as failed with a reason (which must hold no address)."""
    if span_ is not None:
        from opentelemetry.trace import Status, StatusCode

        span_.set_status(Status(StatusCode.ERROR, reason))


def current_context() -> tuple[str, str | None] | None:
    """The current span's context as (traceparent, tracestate) to store with an email; None outside a trace."""
    api = sys.modules.get(_TRACE_API)
    if api is None:
        return None
    context = api.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags) & 0xFF:02x}"
    tracestate = context.trace_state.to_header() or None
    if tracestate is not None and (len(tracestate) > _MAX_TRACESTATE or not _printable(tracestate)):
        tracestate = None  # the database would refuse it; the trace goes on without the vendors' data
    return traceparent, tracestate


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def valid_traceparent(value: object) -> bool:
    """Whether a value is a traceparent Mailroom stores: version 00, lower-case hex, no all-zero id."""
    if not isinstance(value, str):
        return False
    match = _TRACEPARENT.fullmatch(value)
    return match is not None and match[1] != _ZERO_TRACE and match[2] != _ZERO_SPAN


def parent_from(traceparent: object, tracestate: object = None) -> Any:
    """A context whose parent is a stored span, or None (no parent) when there is none or it is malformed.

    The stored value comes from SQL callers we do not control: anything but a valid traceparent is
    ignored (logged at debug), never an error that would stop a delivery."""
    if traceparent is None or (_tracer is None and _TRACE_API not in sys.modules):
        return None
    if not valid_traceparent(traceparent):
        log.debug("ignoring a malformed stored traceparent")
        return None
    assert isinstance(traceparent, str)
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    state = TraceState()
    if isinstance(tracestate, str) and len(tracestate) <= _MAX_TRACESTATE and _printable(tracestate):
        state = TraceState.from_header([tracestate])  # malformed members: an empty state, not an error
    context = SpanContext(
        trace_id=int(traceparent[3:35], 16),
        span_id=int(traceparent[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(traceparent[53:55], 16) & TraceFlags.SAMPLED),
        trace_state=state,
    )
    return trace.set_span_in_context(NonRecordingSpan(context))


def link_to(span_: Any) -> list[Any]:
    """Links to a span from `span` (for a span in another trace: a claim's, say); none when tracing is off."""
    if span_ is None:
        return []
    from opentelemetry.trace import Link

    return [Link(span_.get_span_context())]


@contextmanager
def about_email(email_id: int, correlation_id: str | None) -> Iterator[None]:
    """Log lines written in the block carry this email's id and correlation id (JSON format)."""
    token = _email.set((email_id, correlation_id))
    try:
        yield
    finally:
        _email.reset(token)


def log_fields() -> dict[str, Any]:
    """The ids a JSON log line carries: the email being worked on, its correlation id, the trace and span."""
    fields: dict[str, Any] = {}
    email = _email.get()
    if email is not None:
        fields["email_id"] = email[0]
        if email[1] is not None:
            fields["correlation_id"] = email[1]
    api = sys.modules.get(_TRACE_API)
    if api is not None:
        context = api.get_current_span().get_span_context()
        if context.is_valid:
            fields["trace_id"] = f"{context.trace_id:032x}"
            fields["span_id"] = f"{context.span_id:016x}"
    return fields
