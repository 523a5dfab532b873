"""What every framework adapter checks of its policy when it is built."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from terminus_kernel._native import Machine

Verifier = Callable[[str], bool | tuple[bool, str]]
"""Judges a completion claim (the model's last substantive content): ``True``/``False``, or
``(complete, feedback)``. Asked only when the policy sets ``verify_completion``."""


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


def verified(session: Any, verifier: Verifier | None, step: dict[str, Any] | None) -> Any:
    """``step`` with the verifications it asks answered: by ``verifier`` (its answer as it is,
    ``True``/``False`` or a ``(bool, feedback)`` tuple, read by the host core, which raises
    ``ValueError`` naming ``verdict`` for any other), or without one by the rules
    (``Session.verdict_by_rules``, the host core's). Returns the step the last verdict gave
    (``step`` itself when it asked none)."""
    while step is not None and step.get("verify") is not None:
        if verifier is None:
            step = session.verdict_by_rules()
        else:
            step = session.verdict(verifier(str(step["verify"].get("claim", ""))))
    return step


def scaled(policy: dict[str, Any], scale: Any) -> dict[str, Any]:
    """``policy`` scaled by the kernel for a task of ``scale`` units (its ``budget_scale``, as
    ``terminus run --scale`` scales it), or as given when ``scale`` is ``None``. A bad ``scale``,
    or one without a ``budget_scale``, raises ``ValueError`` naming it."""
    if scale is None:
        return policy
    if not isinstance(scale, int) or isinstance(scale, bool) or scale < 0:
        raise ValueError(f"scale: expected a whole number of at least 0, got {scale!r}")
    if not policy.get("budget_scale"):
        # As a scenario's `scale`: without a `budget_scale` it would change nothing.
        raise ValueError("scale: the policy has no budget_scale to scale by it")
    return dict(Machine(policy, scale=scale).policy)
