"""A hand-written host for the scenario format: it plays a scenario's scripted model, tools and
verifier against a :class:`terminus_kernel.Machine`, the way the Rust runtime plays them, with a
virtual clock instead of real sleeps.

What it models: model turns and failures, ``repeat`` modes ``none`` / ``last`` / ``cycle`` of
every script, the built-in ``write_todos`` tool, undefined tools (``not_found``), arguments
that are not an object (``invalid_arguments``), ``filler_tokens``, refused calls, the rule
verifier (from the ``verify`` command's ``missing``) and a scripted one, and time: a tool's
``delay_ms`` and a model call's backoff advance the clock, so ``cancel_after_ms`` and
``policy.deadline_ms`` fire where the runtime's race would fire them.

What it does not model: the context window (``context``): which messages the model is shown
and when a conversation no longer fits are the runtime's decisions, made with its tokenizer.
Pruning does not change the kernel's path, but a window that ends the run does:
:func:`unsupported` names such a scenario and why.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

from terminus_kernel import Machine

TODO_STATUSES = ("pending", "in_progress", "completed", "cancelled")


class ScriptExhausted(Exception):
    """A ``repeat: "none"`` script ran out (the command line's exit 2)."""


def unsupported(scenario: dict[str, Any]) -> str | None:
    """Why this driver cannot reproduce the scenario's run, or ``None`` when it can.

    A context window only changes what the model is shown (pruning, cut results), which this
    driver's scripted model does not look at, so such scenarios run here as well; but a run the
    window ends (``context_exhausted``: the conversation no longer fits, decided by the
    runtime's tokenizer before the request is sent) is out of its reach. So is a job a tool's
    call started (a recording of an MCP task): the runtime journals it with the call.
    """
    if "context" in scenario and (scenario.get("expect") or {}).get("reason") == (
        "context_exhausted"
    ):
        return (
            "its context window ends the run (context_exhausted): whether the conversation "
            "fits is the runtime's decision, made with its tokenizer, and this driver keeps "
            "no conversation"
        )
    results = [r for t in (scenario.get("tools") or {}).values() for r in t.get("results") or []]
    if any(isinstance(r, dict) and "job" in r for r in results):
        return (
            "a tool's call starts a job (an MCP task), which the runtime that runs the tool "
            "journals with the call; this driver runs no tool and journals no job"
        )
    return None


class Cursor:
    """A script and how far it has been read."""

    def __init__(self, entries: list[Any], repeat: str, what: str) -> None:
        self.entries = entries
        self.repeat = repeat
        self.what = what
        self.used = 0

    def next(self) -> Any:
        n = len(self.entries)
        if self.used < n:
            index = self.used
        elif self.repeat == "last" and n:
            index = n - 1
        elif self.repeat == "cycle" and n:
            index = self.used % n
        else:
            raise ScriptExhausted(f"{self.what} script exhausted after {n}")
        self.used += 1
        return copy.deepcopy(self.entries[index])


def write_todos(arguments: Any) -> dict[str, Any]:
    """The runtime's built-in ``write_todos``: validates ``todos`` and says how many are open."""
    todos = arguments.get("todos") if isinstance(arguments, dict) else None
    valid = isinstance(todos, list) and all(
        isinstance(t, dict)
        and isinstance(t.get("content"), str)
        and t.get("status") in TODO_STATUSES
        for t in todos
    )
    if not valid:
        return {"error": "invalid_arguments", "message": "bad todos"}
    open_ = sum(1 for t in todos if t["status"] in ("pending", "in_progress"))
    return {"ok": f"Todo list updated: {open_} of {len(todos)} open."}


@dataclass
class Run:
    """One driven run: the machine, its report, and the path it took."""

    machine: Machine
    report: dict[str, Any]
    #: Every command the machine gave and every event it was fed, in order.
    path: list[Any] = field(default_factory=list)


def turn_event(spec: dict[str, Any], offered: list[str]) -> dict[str, Any]:
    """A scripted model turn as an event, with the names of the tools the call offered (as the
    runtime offers them: the scenario's tools and ``write_todos``, none to a tool-less call)."""
    if spec.get("cancelled"):
        # The host pulled the kill switch while the model answered this call.
        return {"cancel": True}
    if "error" in spec:
        error: dict[str, Any] = {"kind": spec["error"]}
        if spec.get("retry_after_ms") is not None:
            error["retry_after_ms"] = spec["retry_after_ms"]
        return {"model_error": error}
    turn: dict[str, Any] = {}
    for key in ("text", "needs_more_work", "usage", "finish", "reasoning"):
        if spec.get(key) is not None:
            turn[key] = spec[key]
    turn["tools"] = offered
    if "tool_calls" in spec:
        turn["tool_calls"] = [
            {k: v for k, v in call.items() if k in ("id", "name", "arguments")}
            for call in spec["tool_calls"]
        ]
    return {"model_turn": turn}


def result_of(spec: dict[str, Any]) -> dict[str, Any]:
    """A scripted tool result as the tool's answer."""
    if spec.get("error") is not None:
        return {
            "error": spec["error"],
            "message": spec.get("message") or f"scripted {spec['error']} error",
        }
    value = spec.get("ok")
    if spec.get("filler_tokens") is not None:
        text = value if isinstance(value, str) else _json_text(value)
        value = text + " log" * spec["filler_tokens"]
    return {"ok": value}


def _json_text(value: Any) -> str:
    import json

    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def drive(
    scenario: dict[str, Any],
    *,
    between: Callable[[Machine], Machine] | None = None,
    max_events: int = 10_000,
) -> Run:
    """Runs ``scenario`` through a fresh machine. ``between``, if given, is called after every
    event with the machine and returns the machine to go on with (a snapshot test restores a
    copy there)."""
    name = scenario.get("name")
    tool_names = sorted({*scenario.get("tools", {}), "write_todos"})
    # The whole journal: the report's trace and the explanation's path are compared with the
    # command line's for runs of any length.
    machine = Machine(
        scenario.get("policy"),
        task=scenario["task"],
        name=name,
        scale=scenario.get("scale"),
        journal_steps=None,
    )
    model = Cursor(
        scenario["model"]["turns"], scenario["model"].get("repeat", "none"), "model"
    )
    tools = {
        tool: Cursor(s["results"], s.get("repeat", "none"), f"tool `{tool}`")
        for tool, s in scenario.get("tools", {}).items()
    }
    verifier_script = scenario.get("verifier")
    verifier = (
        Cursor(verifier_script["verdicts"], verifier_script.get("repeat", "none"), "verifier")
        if verifier_script
        else None
    )
    cancel_at = scenario.get("cancel_after_ms")
    deadline = (scenario.get("policy") or {}).get("deadline_ms")
    now = 0
    path: list[Any] = []

    def interrupt(elapsed: int) -> dict[str, Any] | None:
        """The event a wait of ``elapsed`` ms is cut short by (kill switch first, as in the
        runtime's race), advancing the clock; ``None`` if it ends first."""
        nonlocal now
        ends = now + elapsed
        if cancel_at is not None and ends >= cancel_at and (
            deadline is None or cancel_at <= deadline
        ):
            now = max(now, cancel_at)
            return {"cancel": True}
        if deadline is not None and ends >= deadline:
            now = max(now, deadline)
            return {"tick": now}
        now = ends
        return None

    def feed(event: dict[str, Any]) -> None:
        nonlocal machine
        path.append(("event", event))
        machine.handle(event)
        if between is not None:
            machine = between(machine)

    for _ in range(max_events):
        command = machine.next_command()
        if command is None:
            raise AssertionError(f"the machine waits in {machine.phase} with no command")
        path.append(("command", command))
        kind = command["command"]
        if kind in ("nudge", "notice"):
            continue
        if kind == "checkpoint":
            # A checkpoint written for the agent: the scripted model's next reply is its
            # summary, which the conversation keeps (this driver keeps none).
            model.next()
            continue
        if kind == "stop":
            return Run(machine, command["report"], path)
        if kind == "call_model":
            cut = interrupt(command["delay_ms"])
            offered = tool_names if command["tools"] else []
            feed(cut if cut is not None else turn_event(model.next(), offered))
        elif kind == "run_tools":
            results = []
            slowest = 0
            cancelled = False
            for call in command["calls"]:
                tool, arguments = call["name"], call["arguments"]
                if not isinstance(arguments, dict):
                    answer = {"error": "invalid_arguments", "message": "not an object"}
                elif tool == "write_todos":
                    answer = write_todos(arguments)
                elif tool in tools:
                    spec = tools[tool].next()
                    if spec.get("cancelled"):
                        # The host pulled the kill switch while this call ran.
                        cancelled = True
                        break
                    slowest = max(slowest, spec.get("delay_ms") or 0)
                    answer = result_of(spec)
                else:
                    answer = {"error": "not_found", "message": f"there is no tool named `{tool}`"}
                results.append({"call_id": call["id"], "name": tool, **answer})
            cut = {"cancel": True} if cancelled else interrupt(slowest)
            feed(cut if cut is not None else {"tool_results": results})
        elif kind == "verify":
            if verifier is not None:
                verdict = verifier.next()
                event = {"complete": verdict["complete"], "missing": verdict.get("missing", [])}
            else:
                missing = command["missing"]
                event = {"complete": not missing, "missing": missing}
            feed({"verdict": event})
        else:
            raise AssertionError(f"unknown command {command!r}")
    raise AssertionError(f"no stop after {max_events} events")
