"""The host suite's conversations (``spec/hosts/conversations.json``) through the LangChain
middleware: each scenario played by a real ``create_agent`` graph (its scripted model's replies as
``AIMessage``s, its failures raised as a provider SDK raises them, its tools' results as
``ToolMessage``s) gives the report ``terminus run`` gives for it, every counter, and sends the model
what ``terminus run`` sends it, every message of every call (the transcript, in the shape of
``spec/hosts/README.md``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain")

from conftest import REPO  # noqa: E402
from scenario_driver import Cursor as ScriptCursor  # noqa: E402
from scenario_driver import write_todos as builtin_write_todos  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import StructuredTool  # noqa: E402
from pydantic import ConfigDict  # noqa: E402
from terminus_kernel import run_scenario  # noqa: E402
from terminus_kernel._native import scenario_transcript  # noqa: E402
from terminus_kernel.langchain import ERROR_KIND, REPORT_KEY, TerminusMiddleware  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SUITE = json.loads((REPO / "spec" / "hosts" / "conversations.json").read_text())
SCENARIOS = REPO / "spec" / "scenarios"
ERRORS = {
    case["kind"]: case
    for case in reversed(
        json.loads((REPO / "spec" / "hosts" / "provider-errors.json").read_text())["cases"]
    )
}
"""A provider's failure of each kernel class (its status and body), from the provider suite."""

COMPARED = (
    "outcome",
    "reason",
    "rule",
    "steps",
    "model_calls",
    "tool_calls",
    "nudges",
    "verification_failures",
    "no_ops",
    "empty_responses",
    "excluded_tools",
    "entries",
    "result",
    "todos",
    "stats",
    "trace",
    "tool_budget_events",
)

WINDOWED = ("trace", "tool_budget_events")
"""The report's lists of the journal's last ``JOURNAL_STEPS`` steps (the whole run's counts)."""

JOURNAL_STEPS = 16

SKIPPED: dict[str, str] = {}
"""The conversations a framework cannot carry, with the reason (none for this one)."""


def load_scenario(name: str, skipped: dict[str, str] = SKIPPED) -> tuple[Path, dict[str, Any]]:
    """The suite's scenario ``name``: its path and its content (skipped with the reason when
    ``skipped`` lists it)."""
    if name in skipped:
        pytest.skip(skipped[name])
    path = SCENARIOS / f"{name}.json"
    return path, json.loads(path.read_text())


def Cursor(script: dict[str, Any], key: str) -> ScriptCursor:  # noqa: N802 (a class's maker)
    """The script under ``key`` (``turns``, ``results``) and how far it has been read, with the
    scenario's ``repeat`` (the scenario driver's reading of it)."""
    return ScriptCursor(script.get(key) or [], script.get("repeat", "none"), key)


class ProviderError(Exception):
    """A provider SDK's error: the status on the error, the body and headers on its response."""

    def __init__(self, status: int, text: str, retry_after_ms: int | None) -> None:
        super().__init__(text)
        self.status_code = status
        headers = {} if retry_after_ms is None else {"retry-after-ms": str(retry_after_ms)}
        self.response: Any = type(
            "Response", (), {"status_code": status, "text": text, "headers": headers}
        )()


def arguments(args: Any) -> str:
    """Tool-call arguments as the transcript writes them (``terminus_scenario::sent``): compact
    JSON with sorted keys; a string that holds JSON is read first, one that does not is itself."""
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            return args
        if isinstance(parsed, str):
            return args
        args = parsed
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def said(message: BaseMessage) -> dict[str, Any]:
    """``message`` in the transcript's shape (``spec/hosts/README.md``): role and text, the calls
    of an assistant message, the tool of a tool message; no ids."""
    role = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}[message.type]
    out: dict[str, Any] = {"role": role, "text": message.text}
    if isinstance(message, AIMessage):
        calls = [f"{c['name']} {arguments(c['args'])}" for c in message.tool_calls]
        calls += [f"{c['name']} {arguments(c['args'])}" for c in message.invalid_tool_calls]
        if calls:
            out["calls"] = calls
    if isinstance(message, ToolMessage):
        if message.name:
            out["tool"] = message.name
        # A failed call's result as `terminus run` writes one: its class, then the tool's words
        # (the middleware marks the class in the message's metadata).
        kind = message.response_metadata.get(ERROR_KIND)
        if message.status == "error" and kind:
            out["text"] = f"error ({kind}): {message.text}"
    return out


class ConversationModel(BaseChatModel):
    """The scenario's model: each call takes its next turn, and records what it was sent."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    turns: Any
    calls: list[int]
    sent: list[list[dict[str, Any]]] = []

    @property
    def _llm_type(self) -> str:
        return "conversation"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.sent.append([said(m) for m in messages])
        self.calls.append(1)
        n = len(self.calls)
        turn = self.turns.next()
        if "error" in turn:
            case = ERRORS[turn["error"]]
            raise ProviderError(case["status"], case["text"], turn.get("retry_after_ms"))
        valid, invalid = [], []
        for i, call in enumerate(turn.get("tool_calls") or []):
            call_id = call.get("id") or f"call-{n}-{i}"
            args = call.get("arguments", {})
            if isinstance(args, str):
                invalid.append({"id": call_id, "name": call["name"], "args": args, "error": None})
            else:
                valid.append({"id": call_id, "name": call["name"], "args": args or {}})
        usage = turn.get("usage")
        message = AIMessage(
            id=f"reply-{n}",
            content=turn.get("text") or "",
            tool_calls=valid,
            invalid_tool_calls=invalid,
            usage_metadata=None
            if usage is None
            else {**usage, "total_tokens": usage["input_tokens"] + usage["output_tokens"]},
            response_metadata={"finish_reason": turn["finish"]} if turn.get("finish") else {},
            additional_kwargs={"reasoning_content": "thinking"} if turn.get("reasoning") else {},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


def write_todos(arguments: dict[str, Any]) -> tuple[str, str | None]:
    """The runtime's built-in ``write_todos`` (the scenario driver's): its text and error class."""
    answer = builtin_write_todos(arguments)
    if answer.get("error") is not None:
        return answer["message"], answer["error"]
    return answer["ok"], None


def scripted_result(spec: dict[str, Any]) -> tuple[str, str | None]:
    """A scripted tool result: its text, and its error class when it is a failure."""
    if spec.get("error") is not None:
        return spec.get("message") or f"scripted {spec['error']} error", spec["error"]
    value = spec.get("ok")
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text + " log" * (spec.get("filler_tokens") or 0), None


class ScriptedTools(AgentMiddleware):
    """Inside the middleware: answers each call with the scenario's next result for its tool, as
    a tool that marks its failures' class (``response_metadata["terminus_error"]``)."""

    def __init__(self, scripts: dict[str, Any]) -> None:
        super().__init__()
        self.cursors = {name: Cursor(s, "results") for name, s in scripts.items()}

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        call = request.tool_call
        name, args = call["name"], call.get("args")
        if name == "write_todos":
            text, kind = write_todos(args if isinstance(args, dict) else {})
        elif name in self.cursors:
            text, kind = scripted_result(self.cursors[name].next())
        else:
            return handler(request)
        meta = {ERROR_KIND: kind} if kind else {}
        return ToolMessage(
            content=text,
            tool_call_id=call["id"],
            name=name,
            status="error" if kind else "success",
            response_metadata=meta,
        )


def _tool(name: str) -> StructuredTool:
    return StructuredTool.from_function(
        func=lambda **_: "unused",
        name=name,
        description=f"the scenario's {name}",
        args_schema={"type": "object", "properties": {}, "additionalProperties": True},
    )


def assert_terminus_runs_report(report: dict[str, Any], path: Path, waits: list[float]) -> None:
    """``report`` is ``terminus run``'s for the scenario at ``path`` on every compared field, and
    each wait is a backoff the kernel asked for (a failed call or an empty reply, retried)."""
    expected = run_scenario(path)
    exact = [k for k in COMPARED if k not in WINDOWED]
    assert {k: report.get(k) for k in exact} == {k: expected.get(k) for k in exact}
    # The host keeps the journal's last steps (a snapshot that does not grow with the run): the
    # windowed lists are the whole run's entries from the first step it kept on, every one.
    start = report["trace"][0]["step"] if report.get("trace") else 0
    for key in WINDOWED:
        got, whole = report.get(key) or [], expected.get(key) or []
        assert (key in report) == (key in expected), key
        assert got == [e for e in whole if e["step"] >= start], key
    assert len(report["trace"]) == min(len(expected["trace"]), JOURNAL_STEPS)
    assert all(w > 0 for w in waits)


def assert_transcript(sent: list[list[dict[str, Any]]], path: Path) -> None:
    """``sent``, what a framework's model was sent call by call, is what ``terminus run`` sends
    for the scenario at ``path``: every message of every call."""
    _, expected = scenario_transcript(path)
    assert len(sent) == len(expected)
    for call, (got, want) in enumerate(zip(sent, expected, strict=True), start=1):
        assert got == want, f"model call {call}"


def recorded(recording: Path, tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """The scenario of a real model's recorded run, and the file it is written to."""
    scenario = json.loads(recording.read_text())["scenario"]
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    return scenario, path


TRANSCRIPT_LEFT_OUT = {
    "only-excluded-tools": "LangChain answers a call of a tool it does not have itself "
    "(`Error: there is no tool named ...`), before any middleware sees a result",
}
"""The conversations whose transcript differs from ``terminus run``'s, with the reason."""


@pytest.mark.parametrize("name", SUITE["scenarios"])
def test_the_conversation_through_langchain_gives_terminus_runs_report_and_transcript(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, scenario = load_scenario(name)
    sent = through_langchain(scenario, path, monkeypatch)
    if name in TRANSCRIPT_LEFT_OUT:
        return
    # What the model was sent, call by call, every message: what `terminus run` sends.
    assert_transcript(sent, path)


def test_the_transcripts_left_out_are_conversations_of_the_suite() -> None:
    assert set(TRANSCRIPT_LEFT_OUT) <= set(SUITE["scenarios"])
    assert len(SUITE["scenarios"]) - len(TRANSCRIPT_LEFT_OUT) >= 43


def through_langchain(
    scenario: dict[str, Any], path: Path, monkeypatch: pytest.MonkeyPatch
) -> list[list[dict[str, Any]]]:
    """Runs ``scenario`` (kept at ``path``) through a real ``create_agent`` under the middleware,
    asserts ``terminus run``'s report and returns what the model was sent (the transcript)."""
    # The kernel's backoff is waited in real time by the middleware: recorded, not slept.
    waits: list[float] = []
    monkeypatch.setattr("terminus_kernel.langchain.time.sleep", waits.append)
    scripts = scenario.get("tools") or {}
    model = ConversationModel(turns=Cursor(scenario["model"], "turns"), calls=[], sent=[])
    terminus = TerminusMiddleware(scenario.get("policy") or {}, scale=scenario.get("scale"))
    agent = create_agent(
        model=model,
        tools=[_tool(n) for n in sorted({*scripts, "write_todos"})],
        system_prompt=scenario.get("system_prompt"),
        middleware=[terminus, ScriptedTools(scripts)],
    )
    # One tool call at a time, in the reply's order (LangGraph runs a turn's calls on a thread
    # pool otherwise): a scripted tool's results then go to its calls in the order `terminus
    # run` gives them.
    state = agent.invoke(
        {"messages": [{"role": "user", "content": scenario["task"]}]},
        {"recursion_limit": 10_000, "max_concurrency": 1},
    )
    assert_terminus_runs_report(state[REPORT_KEY], path, waits)
    return model.sent


RECORDINGS = sorted(
    p
    for p in (REPO / "spec" / "eval" / "recordings").glob("*/*/*.json")
    if "scenario" in json.loads(p.read_text())
)
"""The real model's recorded runs (``terminus eval``: Qwen2.5-Coder-1.5B's replies as they came,
tool calls written in the text, cut and repeated replies), each with its scenario."""


def test_the_recordings_are_here() -> None:
    assert len(RECORDINGS) >= 30, RECORDINGS


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: "/".join(p.parts[-3:]))
def test_the_real_models_recorded_replies_through_langchain_give_terminus_runs_report_and_transcript(
    recording: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scenario, path = recorded(recording, tmp_path)
    assert_transcript(through_langchain(scenario, path, monkeypatch), path)


NON_ANSWERS = sorted((REPO / "spec" / "eval" / "non-answers").glob("*.json"))
"""The thirty replies the real model's ``complete`` runs once ended on (an apology asking for more
information, a paraphrase of the kernel's guidance, the guidance's words as an identifier), each
taken for the result before the kernel knew it for a non-answer."""


def test_the_thirty_recorded_non_answers_are_here() -> None:
    assert len(NON_ANSWERS) == 30


@pytest.mark.parametrize("recording", NON_ANSWERS, ids=lambda p: p.stem)
def test_a_recorded_non_answer_is_refused_through_langchain(
    recording: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scenario = json.loads(recording.read_text())
    last = scenario["model"]["turns"][-1]["text"]
    # A run nobody answers, and a model that keeps giving the same reply.
    scenario["policy"]["autonomous"] = True
    scenario["model"]["repeat"] = "last"
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    through_langchain(scenario, path, monkeypatch)
    report = run_scenario(path)
    assert report["outcome"] == "aborted" and report["reason"] == "no_progress"
    assert report["stats"]["non_answers"] >= 1
    assert report["result"] != last
