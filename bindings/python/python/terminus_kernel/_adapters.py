"""What every framework adapter checks of its policy when it is built."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from terminus_kernel._native import Session

Verifier = Callable[[str], bool | tuple[bool, str]]
"""Judges a completion claim (the model's last substantive content): ``True``/``False``, or
``(complete, feedback)``. Asked only when the policy sets ``verify_completion``."""


def checked(policy: Mapping[str, Any], scale: Any = None) -> dict[str, Any]:
    """``policy`` as the host core takes it, checked now (a bad field fails here, not mid-run) and
    scaled once for a task of ``scale`` units (its ``budget_scale``, as ``terminus run --scale``
    scales it), by the host core (``Session.check_policy``), which refuses what ``Session.start``
    refuses, with a ``ValueError`` naming it: an unknown or ill-typed field, a bad ``scale``, and
    a ``scale`` without a ``budget_scale`` (it would change nothing)."""
    return dict(Session.check_policy(dict(policy), scale))


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
