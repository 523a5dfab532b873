"""The cost of one event through Python against the same events in Rust (a benchmark, not a test).

The sequence: a model turn calling ``read_file`` on file ``i``, then its result, repeated (two
events a cycle, every turn different so the repeat detector never stops the run). Each event is
``Machine.handle(event)`` followed by draining ``Machine.next_command()`` until ``None``, the loop
a host runs. The event dicts are built before the clock starts.

Rust: ``runtime/examples/host_events.rs``, the same sequence fed to the kernel's ``Machine``
directly and to ``terminus_runtime::host::Host`` (what the binding wraps), built and run here
with ``cargo run --release`` unless ``--no-rust``.

Run from the repository root, with the binding installed (release build:
``pip install ./bindings/python``)::

    python bindings/python/bench/events.py [--events 20000] [--samples 9]

Prints the median nanoseconds per event of each, from one run (wall clock; for Python also the
thread's CPU time, which other processes of a busy machine do not inflate). The prebuilt event
dicts are frozen out of the cyclic collector's sight (``gc.freeze``): a host that builds each
event as it goes never has them scanned.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import time
from pathlib import Path

from terminus_kernel import Machine

REPO = Path(__file__).resolve().parents[3]
POLICY = {"max_steps": 1_000_000_000, "max_model_calls": 1_000_000_000}


def events(n: int) -> list[dict]:
    out: list[dict] = []
    for i in range(n // 2):
        call_id = f"c{i}"
        out.append(
            {
                "model_turn": {
                    "tool_calls": [
                        {"id": call_id, "name": "read_file", "arguments": {"path": f"f{i}"}}
                    ]
                }
            }
        )
        out.append(
            {"tool_results": [{"call_id": call_id, "name": "read_file", "ok": f"content {i}"}]}
        )
    return out


def python_sample(n: int) -> tuple[float, float]:
    """Nanoseconds per event: wall clock, and this thread's CPU time (which a busy machine's
    other processes do not inflate)."""
    sequence = events(n)
    machine = Machine(POLICY)
    while machine.next_command() is not None:
        pass
    handle = machine.handle
    next_command = machine.next_command
    # The prebuilt events stay alive for the whole sample: the collector would scan them again
    # and again, which a host that builds each event as it goes never pays.
    gc.freeze()
    try:
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        for event in sequence:
            handle(event)
            while next_command() is not None:
                pass
        return (time.perf_counter_ns() - wall) / n, (time.thread_time_ns() - cpu) / n
    finally:
        gc.unfreeze()


def rust(n: int, samples: int) -> dict:
    done = subprocess.run(
        [
            "cargo", "run", "--quiet", "--release", "-p", "terminus-runtime",
            "--example", "host_events", "--", str(n), str(samples),
        ],
        cwd=REPO, capture_output=True, text=True, check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--no-rust", action="store_true")
    args = parser.parse_args()
    samples = [python_sample(args.events) for _ in range(args.samples)]
    result = {
        "events": args.events,
        "samples": args.samples,
        "python_ns_per_event": statistics.median(w for w, _ in samples),
        "python_cpu_ns_per_event": statistics.median(c for _, c in samples),
    }
    if not args.no_rust:
        r = rust(args.events, args.samples)
        result["rust_kernel_ns_per_event"] = r["kernel_ns_per_event"]
        result["rust_host_ns_per_event"] = r["host_ns_per_event"]
    print(json.dumps(result))
    for key, value in result.items():
        if key.endswith("_ns_per_event"):
            print(f"  {key[:-13]:<12} {value / 1000:8.3f} us per event (median of {args.samples})")


if __name__ == "__main__":
    main()
