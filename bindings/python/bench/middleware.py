"""The cost of ``TerminusMiddleware`` per agent step: the same DeepAgents run with and without it.

The run is the seed 000 architect's stack (``create_deep_agent`` with a todo list) driven by the
scripted model of the tests, on a chain of ``--turns`` tool turns (each reads a different file)
and a final answer, so every variant takes the same path: the same model calls, the same tool
executions, the same messages. Three variants run, alternating, in one process after a warm-up:

- ``without``: no middleware of ours;
- ``no-op hooks``: a middleware with the same hooks as ``TerminusMiddleware`` (``before_agent``,
  ``after_model`` with its jumps, ``wrap_model_call``, ``wrap_tool_call``, ``after_agent``) that
  does nothing: what LangGraph charges for hooks as such (each ``*_model``/``*_agent`` hook is a
  graph node of its own);
- ``terminus``: the middleware, the kernel and its snapshot in the state.

With ``--latency-ms 0`` (the default) the model answers at once, the harshest comparison there
is; a real model call takes hundreds of milliseconds, and the middleware's cost per step is the
same whatever the model: ``--latency-ms`` makes the scripted model take that long per call.
Medians of wall time and of the process's CPU time (every thread) are reported; the overhead
per agent step (one model turn or one tool turn, as the kernel counts steps) is the difference
of the medians over the run's steps.

    python bindings/python/bench/middleware.py [--turns 20] [--runs 31] [--latency-ms 0]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import seed_architect as seed  # noqa: E402
from langchain.agents.middleware import AgentMiddleware, hook_config  # noqa: E402
from terminus_kernel.langchain import REPORT_KEY, TerminusMiddleware  # noqa: E402


class NoOpHooks(AgentMiddleware):
    """The hooks of ``TerminusMiddleware``, doing nothing."""

    def before_agent(self, state: Any, runtime: Any) -> None:
        """Nothing."""

    @hook_config(can_jump_to=["model", "end"])
    def after_model(self, state: Any, runtime: Any) -> None:
        """Nothing."""

    def after_agent(self, state: Any, runtime: Any) -> None:
        """Nothing."""

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Calls the model."""
        return handler(request)

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Runs the tool."""
        return handler(request)


def script(turns: int) -> list[seed.Turn]:
    """``turns`` tool turns, then a final answer."""
    return [*seed.honest_chain(turns), seed.text_turn("All parts read; the plan is ready.")]


def agent(turns: int, latency_ms: float, middleware: list[AgentMiddleware]) -> Any:
    """The architect's stack, built once (as an application builds its agent once)."""
    model = seed.ScriptedChatModel(script=script(turns), sleep_s=latency_ms / 1000)
    return seed.build_agent(model, middleware)


def once(graph: Any) -> tuple[float, float, dict[str, Any]]:
    """One run: wall seconds, CPU seconds of the process (every thread), and the final state."""
    payload = seed.task_input()
    start, cpu = time.perf_counter(), time.process_time()
    state = graph.invoke(payload)
    return time.perf_counter() - start, time.process_time() - cpu, state


def main() -> None:
    """Measures and prints the medians."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="tool turns per run (<= 40)")
    parser.add_argument("--runs", type=int, default=31, help="measured runs of each variant")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="model latency per call")
    args = parser.parse_args()
    if not 1 <= args.turns <= seed.CHAIN_PARTS:
        parser.error(f"--turns must be between 1 and {seed.CHAIN_PARTS}")
    warnings.simplefilter("ignore", DeprecationWarning)

    policy = {"max_steps": 4 * args.turns + 10}
    variants = {
        "without": agent(args.turns, args.latency_ms, []),
        "no-op hooks": agent(args.turns, args.latency_ms, [NoOpHooks()]),
        "terminus": agent(args.turns, args.latency_ms, [TerminusMiddleware(policy)]),
    }
    _, _, state = once(variants["terminus"])
    report = state[REPORT_KEY]
    if report["outcome"] != "complete":
        raise SystemExit(f"the run under the middleware did not complete: {report}")
    for name, graph in variants.items():
        _, _, other = once(graph)
        if len(other["messages"]) != len(state["messages"]):
            raise SystemExit(f"{name} took another path: the comparison would be unfair")
    for _ in range(2):  # warm-up
        for graph in variants.values():
            once(graph)

    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    gc.collect()
    for _ in range(args.runs):
        for name, graph in variants.items():
            seconds, cpu_seconds, _ = once(graph)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)

    steps = report["steps"]
    print(
        f"run: {args.turns} tool turns + 1 answer = {report['model_calls']} model calls, "
        f"{report['tool_calls']} tool calls, {steps} kernel steps; model latency "
        f"{args.latency_ms:g} ms; {args.runs} runs of each variant, alternating"
    )
    for label, times in (("wall", wall), ("cpu", cpu)):
        base = statistics.median(times["without"])
        print(f"{label} (median)      per run    per step   overhead/step   overhead")
        for name in variants:
            med = statistics.median(times[name])
            print(
                f"  {name:12s} {med * 1e3:9.2f} ms {med / steps * 1e6:8.0f} us "
                f"{(med - base) / steps * 1e6:10.0f} us {(med / base - 1) * 100:+9.1f} %"
            )


if __name__ == "__main__":
    main()
