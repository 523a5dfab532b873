"""Multi-agent plans whose agents are your own async functions, run by the orchestrator of
``terminus orchestrate`` (the native ``NativePlan``, over ``terminus_orchestrator::LocalPlan``).

Every decision is the orchestrator's: which agent starts and with which task (its dependencies'
results filled in), its share of the plan's budget and its deadline, retries with backoff, the
circuit breaker, skips and degraded results, the execution timeout and the phase cap, and the
report. This module only carries the acts out on asyncio: it calls your functions, cancels them
at their deadline or when the plan stops, and keeps the progress where you say after every
change.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from terminus_kernel._native import NativeGenerator, NativePlan


class PlanError(ValueError):
    """A plan that cannot run: :attr:`problems` holds one ``PATH: PROBLEM`` line each."""

    def __init__(self, what: str, problems: list[str]) -> None:
        super().__init__(
            f"{what}: {len(problems)} problem(s); nothing was run\n" + "\n".join(problems)
        )
        self.problems = problems


@dataclass
class PlanAgentContext:
    """What an agent function is given besides its task."""

    #: The agent's id.
    agent: str
    #: The attempt, from 1.
    attempt: int
    #: The attempt's execution id (``{execution}/{agent}/{attempt}``).
    execution: str
    #: Its share of the plan's budget: ``deadline_ms``, ``model_calls``, ``tokens``, ``clamped``.
    grant: dict[str, Any]
    #: The attempt was running when the process stopped; this goes on with it.
    resume: bool
    #: What the agent spent: set it and the plan's budget counts it.
    used: dict[str, int] = field(default_factory=lambda: {"model_calls": 0, "tokens": 0})


AgentFunction = Callable[[str, PlanAgentContext], Any]


def _source(
    plan: str | os.PathLike[str] | Mapping[str, Any], root: str = "plan"
) -> tuple[str, str, str]:
    """The file's JSON text, the folder its file scenarios are read from, its name in errors."""
    if isinstance(plan, Mapping):
        try:
            text = json.dumps(plan, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise PlanError(root, [f"{root}: not JSON: {e}"]) from None
        return text, os.getcwd(), root
    if isinstance(plan, (str, os.PathLike)):
        path = Path(plan)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise PlanError(str(plan), [f"cannot read it: {e}"]) from None
        return text, str(path.resolve().parent), str(plan)
    raise TypeError(f"{root}: must be a file path or a dict")


def _message(error: BaseException) -> str:
    return str(error) or type(error).__name__


async def run_plan(
    plan: str | os.PathLike[str] | Mapping[str, Any],
    *,
    agents: Mapping[str, AgentFunction] | None = None,
    execution: str | None = None,
    progress: Mapping[str, Any] | str | None = None,
    journal: str | os.PathLike[str] | None = None,
    on_progress: Callable[[dict[str, Any]], Awaitable[None] | None] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    cancel: asyncio.Event | None = None,
    generation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Runs ``plan`` (a plan file's path, or the plan as a dict, in the format of ``terminus
    orchestrate``) to its report, the report ``terminus orchestrate --json`` prints.

    ``agents`` maps an agent id to your function ``(task, context) -> result`` (async or not):
    it returns the agent's result (JSON) or raises (the attempt failed); a text result that is
    empty or only hands the task back (``is_non_answer``) fails the attempt; it is cancelled at its
    deadline and when the plan stops. Agents with a ``scenario`` run in process. ``progress`` is
    what ``on_progress`` was given by an earlier run of the same ``execution``: what completed
    does not run again, the breakers are as they were. ``journal`` (a SQLite file, created if
    missing, or a ``postgres://`` URL) keeps the progress instead, under the keys ``terminus
    orchestrate --journal`` uses, each change read back before the plan goes on; a run of the
    same ``execution`` goes on from it, and one of a plan that ended gives its report. Setting
    ``cancel`` cancels the plan.
    ``generation`` (what :func:`generate_plan` gave) is set as the report's ``generation``.
    """
    text, base, what = _source(plan)
    agents = dict(agents or {})
    for id_, fn in agents.items():
        if not callable(fn):
            raise TypeError(f"agents[{id_!r}]: must be a function (task, context) -> result")
    if progress is not None and not isinstance(progress, str):
        progress = json.dumps(progress)
    if journal is not None and not isinstance(journal, (str, os.PathLike)):
        raise TypeError("journal: must be a SQLite file path or a postgres:// URL")
    target = None if journal is None else os.fspath(journal)
    try:
        # Opening a journal blocks (without the GIL): off the event loop.
        run = await asyncio.to_thread(
            NativePlan.start, text, base, execution, progress, list(agents), target
        )
    except ValueError as e:
        message = str(e)
        about = re.match(r"(progress|journal)\b", message)
        raise PlanError(about[1] if about else what, message.split("\n")) from None

    loop = asyncio.get_running_loop()
    started = loop.time()
    before = run.elapsed_before()

    def now() -> int:
        return before + int((loop.time() - started) * 1000)

    #: How to stop each running function (a scenario's run is killed by the orchestrator).
    running: dict[int, Callable[[], None]] = {}
    ended: deque[tuple[int, dict[str, Any]]] = deque()
    wake = asyncio.Event()

    def launch(act: dict[str, Any]) -> None:
        index = act["index"]
        scenario = act["program"] == "scenario"
        settled = False

        def settle(outcome: dict[str, Any]) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            timer.cancel()
            running.pop(index, None)
            ended.append((index, outcome))
            wake.set()

        if scenario:
            attempt = run.scenario_attempt(index)

            async def go() -> dict[str, Any]:
                return {"report": json.loads(await asyncio.to_thread(attempt.run))}

        else:
            context = PlanAgentContext(
                agent=act["agent"],
                attempt=act["attempt"],
                execution=act["execution"],
                grant=act["grant"],
                resume=act["resume"],
            )
            fn = agents[act["agent"]]

            async def go() -> dict[str, Any]:
                result = fn(act["task"], context)
                if inspect.isawaitable(result):
                    result = await result
                try:
                    value = json.loads(json.dumps(result, allow_nan=False))
                except (TypeError, ValueError) as e:
                    return {"error": f"the result of {act['agent']}: not JSON: {e}"}
                return {"result": value, "used": context.used}


        task = asyncio.ensure_future(go())

        # Past the attempt's limit (a function's deadline; a scenario's deadline and the
        # watchdog's grace: the orchestrator's choice), it failed with the orchestrator's words.
        def on_deadline() -> None:
            settle({"error": act["overdue"]})
            task.cancel()

        timer = loop.call_later(act["limit_ms"] / 1000, on_deadline)

        def on_done(t: asyncio.Future[Any]) -> None:
            if t.cancelled():
                settle({"error": "the plan stopped"})
            elif t.exception() is not None:
                settle({"error": _message(t.exception())})  # type: ignore[arg-type]
            else:
                settle(t.result())

        task.add_done_callback(on_done)
        # A scenario's run is killed by the orchestrator (its report still comes); a function
        # the plan stops has failed (its result, if it still gives one, is not taken).
        if not scenario:

            def stop() -> None:
                settle({"error": "the plan stopped"})
                task.cancel()

            running[index] = stop

    cancel_seen = False
    try:
        while True:
            if cancel is not None and cancel.is_set() and not cancel_seen:
                cancel_seen = True
                run.cancel(now())
            while (text_act := run.next(now())) is not None:
                act = json.loads(text_act)
                kind = act["act"]
                if kind == "start":
                    launch(act)
                elif kind == "cancel":
                    for stop in list(running.values()):
                        stop()
                elif kind == "save":
                    # Kept (and read back) before the plan goes on; a journal's writes block.
                    if target is None:
                        run.save()
                    else:
                        await asyncio.to_thread(run.save)
                    if on_progress is not None:
                        kept = on_progress(json.loads(run.progress()))
                        if inspect.isawaitable(kept):
                            await kept
                elif kind == "event":
                    if on_event is not None:
                        on_event({"kind": act["kind"], "agent": act["agent"], "line": act["line"]})
                elif kind == "done":
                    report: dict[str, Any] = act["report"]
                    if generation is not None:
                        report["generation"] = generation
                    return report
            if ended:
                index, outcome = ended.popleft()
                run.finished(index, json.dumps(outcome))
                continue
            at = run.next_wake()
            timeout = None if at is None else max(0, at - now()) / 1000
            wake.clear()
            waiters = [asyncio.ensure_future(wake.wait())]
            if cancel is not None and not cancel_seen:
                waiters.append(asyncio.ensure_future(cancel.wait()))
            _, pending = await asyncio.wait(
                waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            for w in pending:
                w.cancel()
    finally:
        for stop in list(running.values()):
            stop()


@dataclass
class GeneratedPlan:
    """What :func:`generate_plan` came to."""

    #: The plan to give :func:`run_plan` (with ``generation=``), or ``None`` when no written
    #: plan was valid and there is no fallback.
    plan: dict[str, Any] | None
    #: How the model wrote it: ``source``, ``attempts``, ``rejections``...
    generation: dict[str, Any]
    #: When ``plan`` is ``None``: the report of the plan that never ran (``no_valid_plan``).
    report: dict[str, Any] | None


async def generate_plan(
    file: str | os.PathLike[str] | Mapping[str, Any],
    task: str,
    *,
    model: Callable[[list[dict[str, str]]], Any],
    execution: str | None = None,
) -> GeneratedPlan:
    """Asks ``model`` for a plan for ``task`` from the generator file ``file`` (a path or a
    dict, the format of ``terminus orchestrate --generate``): each rejected plan goes back to
    the model with its problems, at most ``generator.max_attempts`` calls, then the fallback.
    ``model(messages)`` (async or not) returns the reply's text, or ``{"text", "cut"}`` when the
    output limit cut it; raising is a failed call (an attempt, told to the next one)."""
    if not isinstance(task, str):
        raise TypeError("task: must be a string")
    if not callable(model):
        raise TypeError("model: must be a function (messages) -> text")
    text, base, what = _source(file, "file")
    try:
        generator = NativeGenerator.start(text, base, task)
    except ValueError as e:
        raise PlanError(what, str(e).split("\n")) from None
    while True:
        step = json.loads(generator.step(execution))
        if "ask" in step:
            # How the call ended, as it ended: the orchestrator reads the output.
            try:
                out = model(step["ask"])
                if inspect.isawaitable(out):
                    out = await out
                ended = json.dumps({"output": out})
            except Exception as e:  # noqa: BLE001 -- a failed call is an attempt, named
                ended = json.dumps({"error": _message(e)})
            generator.answer(ended)
            continue
        if "run" in step:
            return GeneratedPlan(plan=step["run"], generation=step["generation"], report=None)
        return GeneratedPlan(plan=None, generation=step["generation"], report=step["no_plan"])
