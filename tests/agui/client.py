"""The AG-UI Python SDK (``ag-ui-protocol``) on ``terminus serve``.

Runs the architect on a new thread to its interrupt, approves the held call through
``resume``, and runs it to its end. Every event of both streams is parsed with the SDK's
``Event`` union (a discriminated pydantic model, so an event of an unknown type or with a field
of the wrong type is refused), and both requests are the SDK's ``RunAgentInput``. Prints one
JSON line: what a test asserts on (adapters/cli/tests/serve.rs).

    python client.py URL KEY THREAD TASK
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


def main() -> None:
    url, key, thread, task = sys.argv[1:5]
    messages = [UserMessage(id="u1", role="user", content=task)]
    first = run(url, key, RunAgentInput(thread_id=thread, run_id="py-1", messages=messages))
    finished = first[-1]
    if not isinstance(finished, RunFinishedEvent) or finished.outcome is None:
        raise SystemExit(f"the first run did not finish: {finished!r}")
    interrupts = finished.outcome.interrupts
    resume = [
        ResumeEntry(interrupt_id=i.id, status="resolved", payload={"approved": True})
        for i in interrupts
    ]
    second = run(
        url,
        key,
        RunAgentInput(thread_id=thread, run_id="py-2", messages=messages, resume=resume),
    )
    last = second[-1]
    results = [e.tool_call_id for e in second if e.type == EventType.TOOL_CALL_RESULT]
    print(
        json.dumps(
            {
                "runs": [[e.type.value for e in first], [e.type.value for e in second]],
                "interrupts": [
                    {"id": i.id, "reason": i.reason, "toolCallId": i.tool_call_id}
                    for i in interrupts
                ],
                "outcome": last.outcome.type if isinstance(last, RunFinishedEvent) else None,
                "result": last.result if isinstance(last, RunFinishedEvent) else None,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
