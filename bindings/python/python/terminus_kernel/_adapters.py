"""What every framework adapter checks of its policy when it is built."""

from __future__ import annotations

import json
from typing import Any

from terminus_kernel._native import Machine


def check_policy(policy: Any, adapter: str) -> None:
    """Validates ``policy`` now (a bad field fails here, not mid-run), and refuses what a
    framework adapter does not carry out: ``policy.auto_checkpoints`` (a checkpoint written for
    the agent needs the host to ask its model for a summary; ``terminus agent`` and a host driving
    ``Machine`` itself answer the ``checkpoint`` command)."""
    Machine(policy)
    fields = json.loads(policy) if isinstance(policy, str) else policy
    if isinstance(fields, dict) and fields.get("auto_checkpoints"):
        raise ValueError(
            f"policy.auto_checkpoints: {adapter} does not write checkpoints for the agent; "
            "leave it 0 here (terminus agent, or a host driving Machine and answering its "
            "`checkpoint` command, writes them)"
        )
