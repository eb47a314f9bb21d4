"""One OpenTelemetry trace per job, sent when the standard `OTEL_*` environment asks for traces.

Asked for: `OTEL_TRACES_EXPORTER` names exporters (`otlp`, `console`, or any the installed packages register;
`none` turns tracing off), or `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
(OTLP then, as the SDK's own default). Not asked for, nothing of OpenTelemetry is imported and nothing runs.
The rest is the SDK's: each exporter reads its own `OTEL_EXPORTER_*` settings, the batch processor
`OTEL_BSP_*`, the resource `OTEL_SERVICE_NAME` (corral unless given) and `OTEL_RESOURCE_ATTRIBUTES`.

OpenTelemetry is an optional extra (`pip install 'corral[otel]'`): asked for without it, corral refuses to
start, saying so, rather than run without the traces someone asked for.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import datetime
from importlib.metadata import entry_points
from typing import Any

from corral.config import ConfigError
from corral.job_spans import JobTrace

EXPORTERS_GROUP = "opentelemetry_traces_exporter"
"""The entry points under which OpenTelemetry's packages register their span exporters."""
ENVIRONMENT = "the OTEL_* environment"
"""Where a tracing refusal's problems are: not in the config file, under whose name they would mislead."""
OTLP_ALIASES = ("otlp", "otlp_proto_http")
"""`otlp` is registered by the `opentelemetry-exporter-otlp` meta-package; corral's extra brings the HTTP one."""


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces."""
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


class JobTracing:
    """A tracer provider with the exporters the environment names; `send` turns a job's spans into a trace."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import trace

        self._provider = provider
        self._tracer = provider.get_tracer("corral")
        self._in = trace.set_span_in_context

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> JobTracing | None:
        """The tracing the environment asks for, or None; a ConfigError when it cannot be had."""
        if not wanted(environ):
            return None
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            raise ConfigError(
                [
                    "OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT ask for traces, but OpenTelemetry is not "
                    "installed: pip install 'corral[otel]', or unset them (or set OTEL_TRACES_EXPORTER=none)"
                ],
                source=ENVIRONMENT,
            ) from None
        named = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
        provider = TracerProvider(resource=Resource.create(_service(environ)))
        for name in (part.strip() for part in named.split(",")):
            if name:
                provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
        return cls(provider)

    def send(self, trace: JobTrace) -> None:
        """Hand the job's spans to the exporters (batched: the export itself happens in the SDK's thread)."""
        start = _ns(trace.root.start)
        root = self._tracer.start_span(trace.root.name, start_time=start, attributes=trace.root.attributes)
        for event in trace.root.events:
            root.add_event(event.name, event.attributes, timestamp=_ns(event.at))
        parent = self._in(root)
        for child in trace.children:
            span = self._tracer.start_span(child.name, parent, start_time=_ns(child.start), attributes=child.attributes)
            span.end(end_time=_ns(child.end))
        root.end(end_time=_ns(trace.root.end))

    def shutdown(self) -> None:
        """Export what is batched, then stop."""
        self._provider.shutdown()


def _service(environ: Mapping[str, str]) -> dict[str, str]:
    """The service's name: `OTEL_SERVICE_NAME`, else `OTEL_RESOURCE_ATTRIBUTES`' (the SDK reads it), else corral."""
    name = environ.get("OTEL_SERVICE_NAME")
    if name:
        return {"service.name": name}
    return {} if "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "") else {"service.name": "corral"}


def _exporter(name: str) -> Any:
    """The span exporter registered under `name` (`otlp` falls back to the HTTP exporter corral's extra brings)."""
    found = {point.name: point for point in entry_points(group=EXPORTERS_GROUP)}
    candidates = OTLP_ALIASES if name in OTLP_ALIASES else (name,)
    for candidate in candidates:
        if candidate in found:
            exporter = found[candidate].load()
            # The console exporter's default is the `sys.stdout` of when it was first imported: name today's.
            return exporter(out=sys.stdout) if candidate == "console" else exporter()
    known = ", ".join(sorted(found)) or "none"
    raise ConfigError(
        [f"OTEL_TRACES_EXPORTER: no span exporter {name!r} is installed (installed: {known}); name one of those"],
        source=ENVIRONMENT,
    )


def _ns(moment: datetime) -> int:
    """A time as OpenTelemetry takes it: nanoseconds since the epoch."""
    return int(moment.timestamp() * 1_000_000_000)
