"""The AG-UI Python SDK (``ag-ui-protocol``) on ``terminus serve``.

Runs an agent on a new thread; while a run finishes with interrupts, answers each through
``resume`` with the payload ANSWERS gives for its kind (``metadata.terminus.kind``: approval,
deferred or elicitation; default ``{"approval": {"approved": true}}``) and runs again. Every
event of every stream is parsed with the SDK's ``Event`` union (a discriminated pydantic model,
so an event of an unknown type or with a field of the wrong type is refused), and every request
is the SDK's ``RunAgentInput``. Prints one JSON line: what a test asserts on
(adapters/cli/tests/serve.rs).

    python client.py URL KEY THREAD TASK [ANSWERS]
    python client.py --runs KEY RUNS
"""

import json
import sys
import urllib.request

from ag_ui.core import (
    Event,
    EventType,
    ResumeEntry,
    RunAgentInput,
    RunFinishedEvent,
    UserMessage,
)
from pydantic import TypeAdapter

EVENTS = TypeAdapter(Event)


def run(url: str, key: str, run_input: RunAgentInput) -> list:
    """POSTs the input and parses every event of the stream it answers."""
    body = run_input.model_dump_json(by_alias=True, exclude_none=True).encode()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "Authorization": f"Bearer {key}",
        },
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        kind = response.headers["Content-Type"]
        if not kind.startswith("text/event-stream"):
            raise SystemExit(f"not an event stream: {kind}")
        text = response.read().decode()
    events = []
    for block in text.split("\n\n"):
        if not block:
            continue
        if not block.startswith("data: "):
            raise SystemExit(f"not a data line: {block!r}")
        events.append(EVENTS.validate_json(block[len("data: ") :]))
    return events


def kind_of(interrupt) -> str | None:
    return ((interrupt.metadata or {}).get("terminus") or {}).get("kind")


def end(event) -> dict:
    """How a run ended: the last event's type, and its code or the report's reason."""
    result = getattr(event, "result", None)
    return {
        "type": event.type.value,
        "code": getattr(event, "code", None),
        "reason": result.get("report", {}).get("reason") if isinstance(result, dict) else None,
    }


def each(key: str, runs: list) -> None:
    """``--runs KEY RUNS``: each of RUNS (a JSON list of ``{url, thread, task}``) once on a new
    thread; prints, for each, the event types and how it ended."""
    out = []
    for item in runs:
        messages = [UserMessage(id="u1", role="user", content=item["task"])]
        events = run(
            item["url"],
            key,
            RunAgentInput(thread_id=item["thread"], run_id=f"py-{item['thread']}", messages=messages),
        )
        out.append(
            {
                "thread": item["thread"],
                "types": [e.type.value for e in events],
                "last": end(events[-1]),
            }
        )
    print(json.dumps(out))


def main() -> None:
    if sys.argv[1] == "--runs":
        each(sys.argv[2], json.loads(sys.argv[3]))
        return
    url, key, thread, task = sys.argv[1:5]
    answers = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {"approval": {"approved": True}}
    messages = [UserMessage(id="u1", role="user", content=task)]
    runs, asked, resume = [], [], None
    for n in range(1, 6):
        events = run(
            url,
            key,
            RunAgentInput(thread_id=thread, run_id=f"py-{n}", messages=messages, resume=resume),
        )
        runs.append(events)
        last = events[-1]
        if not isinstance(last, RunFinishedEvent):
            raise SystemExit(f"run {n} did not finish: {last!r}")
        if last.outcome is None or last.outcome.type != "interrupt":
            break
        interrupts = last.outcome.interrupts
        asked += interrupts
        resume = [
            ResumeEntry(interrupt_id=i.id, status="resolved", payload=answers[kind_of(i)])
            for i in interrupts
        ]
    last = runs[-1][-1]
    contents: dict[str, int] = {}
    for event in (e for events in runs for e in events):
        if event.type == EventType.TEXT_MESSAGE_CONTENT:
            contents[event.message_id] = contents.get(event.message_id, 0) + 1
    print(
        json.dumps(
            {
                "runs": [[e.type.value for e in events] for events in runs],
                "interrupts": [
                    {
                        "id": i.id,
                        "reason": i.reason,
                        "toolCallId": i.tool_call_id,
                        "kind": kind_of(i),
                        "message": i.message,
                    }
                    for i in asked
                ],
                "contents": contents,
                "outcome": last.outcome.type if last.outcome else None,
                "result": last.result,
                "results": [
                    e.tool_call_id
                    for events in runs[1:]
                    for e in events
                    if e.type == EventType.TOOL_CALL_RESULT
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
