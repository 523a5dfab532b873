"""The cost of ``TerminusMiddleware`` per agent step, and in a checkpointer: the same DeepAgents
run with and without it.

The run is the seed 000 architect's stack (``create_deep_agent`` with a todo list) driven by the
scripted model of the tests, on a chain of ``--turns`` tool turns (each reads a different file)
and a final answer, so every variant takes the same path: the same model calls, the same tool
executions, the same messages. Four variants run, alternating, in one process after a warm-up:

- ``without``: no middleware of ours;
- ``no-op hooks``: a middleware with the same hooks as ``TerminusMiddleware`` (``before_agent``,
  ``wrap_model_call``, ``wrap_tool_call``, ``after_agent``) that does nothing: what LangGraph
  charges for hooks as such (each ``*_agent`` hook is a graph node of its own, run once);
- ``built-ins``: LangChain's own ``ModelCallLimitMiddleware`` + ``ToolCallLimitMiddleware``
  (limits the run never reaches), the bar to meet;
- ``terminus``: the middleware, the kernel and its snapshot in the state.

With ``--latency-ms 0`` (the default) the model answers at once, the harshest comparison there
is; a real model call takes hundreds of milliseconds, and the middleware's cost per step is the
same whatever the model: ``--latency-ms`` makes the scripted model take that long per call.
Medians of wall time and of the process's CPU time (every thread) are reported; the overhead
per agent step (one model turn or one tool turn, as the kernel counts steps) is the difference
of the medians over the run's steps.

    python bindings/python/bench/middleware.py [--turns 20] [--runs 31] [--latency-ms 0]

Timings on a shared machine are noisy; instructions are not. ``--only VARIANT`` runs that one
variant ``--runs`` times and nothing else, for ``valgrind --tool=callgrind`` to count: the
difference between two counts (``--runs 1`` and ``--runs 5``, say) is what the extra runs
cost, whatever the imports and set-up cost, and the same for every run of the same build::

    PYTHONHASHSEED=0 valgrind --tool=callgrind python bindings/python/bench/middleware.py \
        --only terminus --turns 20 --runs 5

With ``--checkpoint DIR`` it measures instead what each variant costs a checkpointer: the run (of
``--turns`` tool turns, 200 by default there) on LangGraph's ``SqliteSaver`` with
``durability="sync"`` (every step's checkpoint written before the next step), one database in
``DIR`` per variant; it prints each database's size, the bytes of its checkpoints and of its
pending writes, the ratio to ``without``, and the size of the machine's snapshot in the final
state, with the run's wall time:

    python bindings/python/bench/middleware.py --checkpoint /tmp/ckpt [--turns 200]
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import seed_architect as seed  # noqa: E402
from langchain.agents.middleware import (  # noqa: E402
    AgentMiddleware,
    ModelCallLimitMiddleware,
    ToolCallLimitMiddleware,
)
from terminus_kernel.langchain import MACHINE_KEY, REPORT_KEY, TerminusMiddleware  # noqa: E402


class NoOpHooks(AgentMiddleware):
    """The hooks of ``TerminusMiddleware``, doing nothing."""

    def before_agent(self, state: Any, runtime: Any) -> None:
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


def agent(
    turns: int, latency_ms: float, middleware: list[AgentMiddleware], checkpointer: Any = None
) -> Any:
    """The architect's stack, built once (as an application builds its agent once)."""
    model = seed.ScriptedChatModel(script=script(turns), sleep_s=latency_ms / 1000)
    return seed.build_agent(model, middleware, checkpointer)


def middleware(turns: int) -> dict[str, Callable[[], list[AgentMiddleware]]]:
    """Each variant's middleware, by name (made anew for each agent)."""
    calls = 2 * turns + 10
    return {
        "without": list,
        "no-op hooks": lambda: [NoOpHooks()],
        "built-ins": lambda: [
            ModelCallLimitMiddleware(run_limit=calls),
            ToolCallLimitMiddleware(run_limit=calls),
        ],
        "terminus": lambda: [
            TerminusMiddleware({"max_steps": 2 * calls, "max_model_calls": calls})
        ],
    }


def task_input(turns: int) -> dict[str, Any]:
    """The task and the repository, with a source file for each tool turn to read."""
    return {**seed.task_input(), "files": seed.seed_files(max(turns, seed.CHAIN_PARTS))}


def once(graph: Any, turns: int) -> tuple[float, float, dict[str, Any]]:
    """One run: wall seconds, CPU seconds of the process (every thread), and the final state."""
    payload = task_input(turns)
    start, cpu = time.perf_counter(), time.process_time()
    state = graph.invoke(payload)
    return time.perf_counter() - start, time.process_time() - cpu, state


def checkpoints(turns: int, directory: Path) -> None:
    """Runs each variant once on a ``SqliteSaver`` of its own (``durability="sync"``) and prints
    what its database holds."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, make in middleware(turns).items():
        path = directory / f"{name.replace(' ', '-')}.db"
        path.unlink(missing_ok=True)
        with sqlite3.connect(path, check_same_thread=False) as conn:
            graph = agent(turns, 0.0, make(), SqliteSaver(conn))
            config = {"configurable": {"thread_id": name}, "recursion_limit": 20 * turns + 100}
            start = time.perf_counter()
            state = graph.invoke(task_input(turns), config, durability="sync")
            seconds = time.perf_counter() - start
            stored = conn.execute(
                "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) "
                "FROM checkpoints), (SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes), "
                "(SELECT COUNT(*) FROM checkpoints)"
            ).fetchone()
            # The checkpointed state: the private keys too.
            snapshot = graph.get_state(config).values.get(MACHINE_KEY)
        conn.close()
        report = state.get(REPORT_KEY)
        if report is not None and report["outcome"] != "complete":
            raise SystemExit(f"the run under the middleware did not complete: {report}")
        rows.append((name, path.stat().st_size, *stored, seconds, snapshot))
    base = rows[0][1]
    print(
        f"checkpoints: {turns} tool turns + 1 answer on SqliteSaver, durability=sync "
        f"(one run of each variant)"
    )
    print("  variant        database   ratio  checkpoints  pending writes  count  snapshot     run")
    for name, size, ckpt, writes, count, seconds, snapshot in rows:
        snap = f"{len(snapshot):6d} B" if isinstance(snapshot, bytes) else "       -"
        print(
            f"  {name:12s} {size / 1e6:7.2f} MB {size / base:6.2f}x {ckpt / 1e6:8.2f} MB "
            f"{writes / 1e6:11.2f} MB {count:6d} {snap} {seconds:6.2f} s"
        )


def main() -> None:
    """Measures and prints the medians."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=None, help="tool turns per run (20)")
    parser.add_argument("--runs", type=int, default=31, help="measured runs of each variant")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="model latency per call")
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="measure the checkpoints, in this directory"
    )
    parser.add_argument(
        "--only", default=None, help="run only this variant --runs times (for an instruction count)"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    if args.checkpoint is not None:
        checkpoints(args.turns or 200, args.checkpoint)
        return
    turns = args.turns or 20
    if turns < 1:
        parser.error("--turns must be at least 1")
    if args.only is not None:
        makers = middleware(turns)
        if args.only not in makers:
            parser.error(f"--only: one of {', '.join(map(repr, makers))}, not {args.only!r}")
        graph = agent(turns, args.latency_ms, makers[args.only]())
        for _ in range(args.runs):
            once(graph, turns)
        return

    variants = {
        name: agent(turns, args.latency_ms, make()) for name, make in middleware(turns).items()
    }
    _, _, state = once(variants["terminus"], turns)
    report = state[REPORT_KEY]
    if report["outcome"] != "complete":
        raise SystemExit(f"the run under the middleware did not complete: {report}")
    for name, graph in variants.items():
        _, _, other = once(graph, turns)
        if len(other["messages"]) != len(state["messages"]):
            raise SystemExit(f"{name} took another path: the comparison would be unfair")
    for _ in range(2):  # warm-up
        for graph in variants.values():
            once(graph, turns)

    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    gc.collect()
    for _ in range(args.runs):
        for name, graph in variants.items():
            seconds, cpu_seconds, _ = once(graph, turns)
            wall[name].append(seconds)
            cpu[name].append(cpu_seconds)

    steps = report["steps"]
    print(
        f"run: {turns} tool turns + 1 answer = {report['model_calls']} model calls, "
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
