"""Type stubs of the compiled core, ``terminus_kernel._native``."""

from os import PathLike
from typing import Any, Literal, final

__version__: str

Phase = Literal["Exploring", "Acting", "Verifying", "Nudged", "Complete", "Aborted"]
Handled = Literal["step", "observed", "ignored"]

@final
class Machine:
    """The kernel: feed it events with :meth:`handle`, take its commands with
    :meth:`next_command` until it returns ``None``, repeat until a ``stop`` command.

    ``policy`` takes the scenario ``policy`` fields (``max_steps``, ``max_model_calls``,
    ``max_no_ops``, ``max_nudges``, ``verify_completion``, ``completion_requires``, ...), same
    names and defaults; an unknown or ill-typed field raises ``ValueError`` naming it
    (``policy.max_stpes: unknown field, ...``). ``task`` and ``name`` only label the run in
    :meth:`explain`; ``scale``, the task's size in units, scales the policy's ``budget_scale``.
    ``journal_steps``: how many of the run's last steps the machine keeps of its journal (16 by
    default, ``None`` for all): they make the report's ``trace`` and the explanation's path,
    while every count stays the whole run's, so that :meth:`snapshot` does not grow with the run.
    """

    def __init__(
        self,
        policy: dict[str, Any] | None = None,
        *,
        task: str = "",
        name: str | None = None,
        scale: int | None = None,
        journal_steps: int | None = 16,
    ) -> None: ...
    def handle(self, event: dict[str, Any]) -> Handled:
        """Feeds one event, a dict with one key:

        - ``{"model_turn": {"text", "tool_calls": [{"id", "name", "arguments"}],
          "needs_more_work", "usage": {"input_tokens", "output_tokens"}, "finish",
          "reasoning"}}`` (every key optional but a call's ``name``; a call without ``id``
          gets ``call-{model call}-{index}``);
        - ``{"model_error": {"kind", "retry_after_ms"}}`` with kind ``rate_limited``,
          ``server``, ``timeout``, ``auth``, ``bad_request`` or ``context_overflow``;
        - ``{"tool_results": [{"call_id", "name", "ok": ANY} |
          {"call_id", "name", "error": KIND, "message"}]}`` for the calls of the last
          ``run_tools`` (KIND: ``permission_denied``, ``not_found``, ``auth_failed``,
          ``timeout``, ``invalid_arguments``, ``failed``);
        - ``{"verdict": {"complete": bool, "feedback": str, "missing": [str]}}``;
        - ``{"tick": now_ms}`` (milliseconds since the run started);
        - ``{"cancel": True}``.

        Returns ``"step"`` (a transition: commands are waiting), ``"observed"`` (a clock
        reading before the deadline) or ``"ignored"`` (the kernel does not expect this event in
        its state; counted in ``stats["ignored_events"]``). A malformed event raises
        ``ValueError`` naming its JSON path (``event.model_turn.tool_calls[0].name: ...``) and
        changes nothing.
        """
    def next_command(self) -> dict[str, Any] | None:
        """The next command, or ``None`` while the kernel waits for an event:

        - ``{"command": "call_model", "delay_ms": int, "tools": bool}``: call the model after
          ``delay_ms`` (backoff); ``tools`` is false for the final-answer call;
        - ``{"command": "run_tools", "calls": [{"id", "name", "arguments"}]}``: run these
          calls and answer with ``tool_results``; with ``"refused": [{"id", "name",
          "arguments", "text"}]`` (calls of excluded tools: give the model ``text`` as their
          result, do not run them) and ``"warnings": [{"id", "text"}]`` (append to that call's
          result) when there are any;
        - ``{"command": "verify", "claim": str, "todos": [...], "missing": [str]}``: ask the
          verifier and answer with ``verdict`` (``missing`` is what the rules say is still
          open: a rule verifier answers ``complete`` when it is empty);
        - ``{"command": "nudge" | "notice", "text": str}``: add ``text`` to the conversation
          before the next model call;
        - ``{"command": "checkpoint", "prompt": str, "note": str, "blocked": [str], "lifted":
          [str]}`` (only with ``policy.auto_checkpoints``): ask the model with ``prompt`` (no
          tools) for a summary of the findings so far, then add ``note``, a blank line and the
          summary to the conversation before the next model call;
        - ``{"command": "stop", "report": dict}``: the run ended (see :meth:`report`).
        """
    @property
    def phase(self) -> Phase:
        """The current state."""
    @property
    def policy(self) -> dict[str, Any]:
        """The policy the machine runs under (scaled and raised as it is now)."""
    @property
    def stats(self) -> dict[str, int]:
        """Every counter of the kernel (``steps``, ``model_calls``, ``tool_calls``,
        ``nudges``, ``no_ops``, ``empty_responses``, ``ignored_events``, ...)."""
    def budgets(self, elapsed_ms: int | None = None) -> dict[str, dict[str, int]]:
        """Where each budget the policy sets stands, by name (``steps``, ``tokens``,
        ``output_tokens``, ``deadline``, ...): ``{limit_field, spent, limit, left}``, as
        ``terminus serve``'s AG-UI state shows them; the deadline only with ``elapsed_ms``, the
        time since the run started."""
    def state(self, elapsed_ms: int | None = None) -> dict[str, Any]:
        """The run's state as a user interface follows it, the kernel's part of ``terminus
        serve``'s AG-UI state: ``status`` (``running``), ``phase``, ``step``, ``counters``,
        ``budgets`` (the deadline only with ``elapsed_ms``), ``todos``, ``excluded_tools``,
        ``tool_budgets``, and ``elapsed_ms`` when given."""
    def report(self) -> dict[str, Any]:
        """The report, with the fields of ``terminus run --json`` but the execution id:
        ``outcome``, ``reason``, ``steps``, ``model_calls``, ``tool_calls``, ``nudges``,
        ``verification_failures``, ``no_ops``, ``empty_responses``, ``excluded_tools``,
        ``entries``, ``duplicates_prevented``, ``result``, ``rule``, ``todos``, ``stats``,
        ``trace``. While the run goes on, ``outcome``, ``reason`` and ``rule`` are ``None``."""
    def explain(self) -> str:
        """Why the run stopped and what to change: the text ``terminus inspect`` prints for
        the same run (for a live run: where it is)."""
    def raise_budgets(self, budgets: dict[str, int]) -> Handled:
        """Goes on with a run a budget stopped, with that budget raised (``{"max_steps": 40}``:
        ``max_steps``, ``max_model_calls``, ``token_budget``, ``max_output_tokens``,
        ``max_tool_calls`` or ``max_nudges`` to its new value): the step the stop pre-empted is taken, and its
        commands follow. A raise that does not lift the budget that stopped the run raises
        ``ValueError`` saying why, and changes nothing."""
    def snapshot(self) -> str:
        """The whole machine (state, counters, pending commands, the journal's last
        ``journal_steps`` steps) as JSON text, of a size that does not grow with the run;
        :meth:`restore` gives it back."""
    @staticmethod
    def restore(snapshot: str) -> Machine:
        """A machine saved by :meth:`snapshot`, which goes on exactly as the saved one would.
        Text that is not a consistent snapshot raises ``ValueError``."""

def run_scenario(scenario: str | PathLike[str] | dict[str, Any]) -> dict[str, Any]:
    """Runs a scenario (a file path or the scenario as a dict) in process, with the runtime
    ``terminus run`` uses, and returns its report without the execution id. A scenario that is
    not valid, or a script that runs out, raises ``ValueError`` with the message the command
    line gives."""

def provider_error_kind(status: int, text: str) -> str:
    """The kernel's class of a provider failure (``rate_limited``, ``server``, ``timeout``,
    ``auth``, ``bad_request``, ``context_overflow``) from its HTTP status and the error's text or
    body: the table every host shares. A status outside 100-599 raises ``ValueError``."""

def retry_after_ms(retry_after_ms: str | None = None, retry_after: str | None = None) -> int | None:
    """The delay a provider asked for, in milliseconds, from its ``retry-after-ms`` and
    ``retry-after`` headers (seconds or an HTTP date), capped at 60 s; ``None`` when neither says
    one: the parser every host shares."""

def with_notices(content: str, notices: list[str]) -> str:
    """``content`` with a step's ``notices`` after it, where its ``notice_to`` says: joined by
    blank lines, after a blank line, or alone when ``content`` is empty (the rule ``terminus run``
    follows, one place for every adapter)."""

def checkpoint_message(
    note: str, summary: str | None = None, failed: tuple[str, str] | None = None
) -> str:
    """The user message a checkpoint written for the agent adds before the next model call (a
    step's ``checkpoint``: ``{"prompt", "note"}``): ``note``, a blank line, then the model's
    ``summary`` (trimmed), or why there is none: ``failed``, the failed call's ``(kind,
    message)``, or neither (no answer in time); the words ``terminus run`` writes."""

def json_patch(old: Any, new: Any) -> list[dict[str, Any]]:
    """The RFC 6902 operations that turn ``old`` into ``new`` (JSON values): objects key by key
    (in key order), anything else replaced whole; ``[]`` when they are equal. The diff of
    ``terminus serve``'s ``STATE_DELTA``; a value that is not JSON raises ``ValueError`` naming
    where."""

class NativePlan:
    """A multi-agent plan run whose agents are the host's own: the decisions of ``terminus
    orchestrate``, the acts as JSON text (``terminus_kernel.plan.run_plan`` carries them out)."""

    @staticmethod
    def start(
        text: str,
        base: str,
        execution: str | None = None,
        progress: str | None = None,
        functions: list[str] = ...,
        journal: str | None = None,
    ) -> NativePlan:
        """The run of the plan ``text``, ``functions`` naming the agents the host gave a
        function, its progress in ``journal`` when given (opening it blocks, without the GIL);
        an invalid plan raises ``ValueError`` with one ``PATH: PROBLEM`` line per problem."""
    def save(self) -> None:
        """Keeps what changed in the journal, each cell read back (blocking, without the GIL);
        nothing to do without a journal."""
    def next(self, now_ms: int) -> str | None:
        """The next act at plan time ``now_ms`` (JSON text), or ``None``."""
    def finished(self, index: int, outcome: str) -> None:
        """How the attempt of agent ``index`` ended (JSON text)."""
    def scenario_attempt(self, index: int) -> NativeAttempt:
        """The scenario attempt of agent ``index``."""
    def cancel(self, now_ms: int) -> None:
        """The host cancels the plan."""
    def next_wake(self) -> int | None:
        """When (plan time) there is something to do if no attempt ends first."""
    def elapsed_before(self) -> int:
        """Plan time spent before this process went on."""
    def progress(self) -> str:
        """The progress to keep (JSON text)."""

class NativeAttempt:
    """A plan's scenario attempt."""

    def run(self) -> str:
        """Runs it in process, blocking without the GIL: its report as JSON text."""

class NativeGenerator:
    """A plan written by a model the host calls (``terminus_kernel.plan.generate_plan``)."""

    @staticmethod
    def start(text: str, base: str, task: str) -> NativeGenerator:
        """The generation of a plan for ``task``; a bad file raises ``ValueError``."""
    def step(self, execution: str | None = None) -> str:
        """What to do next (JSON text): ``ask``, ``run`` or ``no_plan``."""
    def answer(self, ended: str) -> None:
        """How the model call for the last ``ask`` ended (JSON text: ``{"output"}`` or
        ``{"error"}``)."""

def is_non_answer(text: str) -> bool:
    """Whether ``text``, taken for an agent's answer in a run nobody answers, only hands the task
    back (the kernel's rule of what a final answer is)."""

def start_telemetry() -> tuple[bool, bool]:
    """Starts the process's telemetry: ``(exporting spans, started already)``."""

def metrics_text() -> str | None:
    """The metrics recorded since the telemetry started, as Prometheus text."""

def flush_telemetry() -> None:
    """Sends the spans batched so far."""

def shutdown_telemetry() -> None:
    """Flushes and stops the span exporter, for good."""

def scenario_transcript(scenario: str | PathLike[str] | dict[str, Any]) -> tuple[dict[str, Any], list[list[dict[str, Any]]]]:
    """:func:`run_scenario`'s report and what the scripted model was sent, call by call (each
    message ``{"role", "text"}``, with ``"calls"`` or ``"tool"``): the host suite's reference."""
