"""The process's telemetry (``terminus_kernel.telemetry``): a plan run's spans reach a real OTLP
decoder (the receiver of adapters/fixture, run by the Python of the peers' ``otlp`` virtualenv,
which decodes with the pinned ``opentelemetry-proto``) as ``terminus orchestrate``'s do, and its
metrics are Prometheus text. Each case runs ``telemetry_child.py`` in a process of its own: a
process starts its telemetry once, from its environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_server import REPO, peers_dir

CHILD = Path(__file__).with_name("telemetry_child.py")


def child(mode: str, **env: str) -> dict[str, Any]:
    """Runs the child in ``mode`` with ``env`` over an environment with no ``OTEL_*`` variable;
    its last line of output, read as JSON."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, str(CHILD), mode],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().split("\n")[-1])
    return out


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An OTLP/HTTP receiver on a free port: its endpoint and the file of JSON lines it writes."""
    python = peers_dir() / "otlp" / "bin" / "python"
    if not python.is_file():
        why = f"the OTLP receiver's virtualenv is not in {python.parent.parent} (.ci/peers.sh)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    out = tmp_path / "otlp.jsonl"
    process = subprocess.Popen(
        [str(python), str(REPO / "adapters" / "fixture" / "otlp_receiver.py"), "0", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        assert first.startswith("listening 127.0.0.1:"), first
        yield f"http://{first.removeprefix('listening ')}", out
    finally:
        process.terminate()
        process.wait(timeout=10)


def spans(out: Path, name: str, within_s: float = 10.0) -> list[dict[str, Any]]:
    """The spans named ``name`` the receiver decoded, waiting for the first."""
    deadline = time.monotonic() + within_s
    while True:
        lines = out.read_text().splitlines() if out.exists() else []
        found = [s for s in map(json.loads, lines) if s.get("name") == name]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def metric(text: str, series: str) -> float:
    """The value of the Prometheus series ``series`` (name and labels, as written) in ``text``."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no series {series} in:\n{text}")


def test_a_plan_run_exports_its_span_and_events_and_records_its_metrics(
    receiver: tuple[str, Path],
) -> None:
    endpoint, out = receiver
    ran = child(
        "plan", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="terminus-python-test"
    )
    assert ran["first"] == [True, False]
    assert ran["again"] == [True, True]
    assert (ran["outcome"], ran["reason"]) == ("complete", "degraded")

    # Exported by the exit handler: the child never flushed.
    (plan,) = spans(out, "plan traced")
    assert plan["resource"]["service.name"] == "terminus-python-test"
    attributes = plan["attributes"]
    assert attributes["terminus.plan.name"] == "traced"
    assert attributes["terminus.plan.agents"] == 3
    assert attributes["terminus.outcome"] == "complete"
    assert attributes["terminus.plan.reason"] == "degraded"
    events = [(e["name"], e["attributes"].get("gen_ai.agent.name")) for e in plan["events"]]
    assert ("agent_retry", "flaky") in events, events
    assert ("agent_degraded", "research") in events, events
    retry = next(e for e in plan["events"] if e["name"] == "agent_retry")
    assert retry["attributes"]["terminus.attempt"] == 2

    text = ran["metrics"]
    assert metric(text, 'terminus_plans_total{outcome="complete",reason="degraded"}') == 1
    assert metric(text, "terminus_agent_retries_total") == 1
    assert "terminus_agent_degradations_total{" in text
    assert metric(text, 'terminus_agent_duration_seconds_count{status="complete"}') == 2


def test_without_an_endpoint_no_span_is_exported_and_a_shut_down_telemetry_stays_down() -> None:
    ran = child("lifecycle")
    assert ran["metrics_before"] is None
    assert ran["exporting_spans"] is False
    assert isinstance(ran["metrics_after"], str)
    assert ran["second_start"] == "telemetry was shut down: a process starts it once"


def test_an_endpoint_that_is_not_a_url_is_refused_naming_the_exporter() -> None:
    ran = child("bad", OTEL_EXPORTER_OTLP_ENDPOINT="not a url")
    assert ran["error"] == "ValueError", ran
    assert ran["message"].startswith("OTLP exporter"), ran
