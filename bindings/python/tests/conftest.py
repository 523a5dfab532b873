"""Shared fixtures: the conformance scenarios and the `terminus` command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = sorted((REPO / "spec" / "scenarios").glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    """A scenario file as a dict, named after its file when it has no name (as the CLI does)."""
    scenario = json.loads(path.read_text())
    scenario.setdefault("name", path.stem)
    return scenario


def terminus_binary() -> Path | None:
    """The `terminus` binary: $TERMINUS_BIN, else the workspace's debug or release build."""
    given = os.environ.get("TERMINUS_BIN")
    if given:
        return Path(given)
    for profile in ("debug", "release"):
        candidate = REPO / "target" / profile / "terminus"
        if candidate.is_file():
            return candidate
    found = shutil.which("terminus")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def terminus() -> Path:
    binary = terminus_binary()
    if binary is None:
        pytest.skip(
            "no `terminus` binary to compare with: build it with `cargo build -p terminus-cli` "
            "or set TERMINUS_BIN"
        )
    return binary


def cli(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, timeout=120, check=False
    )
