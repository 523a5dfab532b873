"""The process's telemetry: the spans and metrics of :func:`terminus_kernel.run_plan` (and of
every plan run in this process), those ``terminus orchestrate`` makes, sent where the command line
sends them.

:func:`start` once, early (it reads the environment then):

- the spans (the ``plan {name}`` span and its events, docs/plans.md "Traces and metrics") are
  exported over OTLP HTTP/protobuf when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, with ``OTEL_EXPORTER_OTLP_HEADERS``,
  ``OTEL_EXPORTER_OTLP_TIMEOUT``, ``OTEL_SERVICE_NAME`` (default ``terminus``) and
  ``OTEL_RESOURCE_ATTRIBUTES`` as the command line reads them; ``OTEL_SDK_DISABLED=true`` turns
  them off. The endpoint is plain ``http://`` (a collector beside the process): the package
  carries no TLS, so an ``https://`` endpoint fails at export.
- the metrics (``terminus_plans_total`` and the rest) are recorded from then on;
  :func:`metrics_text` gives them as Prometheus text for your own web server's ``/metrics``.

:func:`flush` sends the spans batched so far (before a Lambda handler returns and the process is
frozen); :func:`shutdown` flushes and stops the exporter, and runs by itself when the interpreter
exits. A process starts its telemetry once: a second :func:`start` does nothing and says so, one
after :func:`shutdown` raises ``RuntimeError``. A bad setting (an endpoint that is not a URL)
raises ``ValueError`` naming the exporter.
"""

from __future__ import annotations

import atexit
import sys
from dataclasses import dataclass

from terminus_kernel import _native

__all__ = ["Started", "flush", "metrics_text", "shutdown", "start"]


@dataclass(frozen=True)
class Started:
    """What :func:`start` set up."""

    exporting_spans: bool
    """Whether spans are exported over OTLP (an endpoint variable is set)."""
    already: bool
    """Whether an earlier call had started it already (nothing was done this time)."""


_exit_registered = False


def start() -> Started:
    """Starts the process's telemetry from the ``OTEL_*`` variables (see the module)."""
    global _exit_registered
    exporting, already = _native.start_telemetry()
    if not _exit_registered:
        atexit.register(_flush_at_exit)
        _exit_registered = True
    return Started(exporting_spans=exporting, already=already)


def metrics_text() -> str | None:
    """The metrics recorded since :func:`start`, as Prometheus text (what ``terminus serve
    --metrics`` serves); ``None`` before :func:`start`."""
    return _native.metrics_text()


def flush() -> None:
    """Sends the spans batched so far and waits for the collector's answer (``RuntimeError``
    when it does not take them)."""
    _native.flush_telemetry()


def shutdown() -> None:
    """Flushes and stops the span exporter, for good; the metrics stay readable."""
    _native.shutdown_telemetry()


def _flush_at_exit() -> None:
    # A collector that is down at exit is said, not raised: the exit stays clean.
    try:
        _native.shutdown_telemetry()
    except RuntimeError as e:
        print(f"terminus telemetry: {e}", file=sys.stderr)
