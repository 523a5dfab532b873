"""Terminus: an agent kernel that makes every way an LLM agent run stops explicit, counted and
bounded.

The kernel is sans-IO: the host keeps its own model client and tools, feeds the kernel what
happened (:meth:`Machine.handle`) and asks it what to do next (:meth:`Machine.next_command`).

- :class:`Machine` -- the kernel, with the JSON vocabulary of events and commands.
- :func:`run_scenario` -- runs a scenario file (scripted model, tools and verifier) in process
  and returns the report ``terminus run --json`` prints, without the execution id.
- :func:`run_plan` -- a multi-agent plan (the format of ``terminus orchestrate``) whose agents
  are your async functions, with every decision of the orchestrator (dependencies, budgets,
  deadlines, retries, the circuit breaker, skips and degradation) and its report; its progress
  kept where you say, so that a killed process goes on without running a completed agent again;
  :func:`generate_plan` asks your model for the plan first.
- :func:`is_non_answer` -- whether a reply only hands the task back (the kernel's rule of what
  a final answer is), for an agent whose reply does not go through the kernel.
- :func:`provider_error_kind` -- the kernel's class of a provider failure from its HTTP status
  and the error's text: the table every host shares.
- :func:`retry_after_ms` -- the delay a provider's ``retry-after-ms`` / ``retry-after`` headers
  ask for (seconds or an HTTP date, capped at 60 s): the parser every host shares.
- ``terminus_kernel.telemetry`` -- ``start()`` once: the plan runs' spans exported over OTLP
  from the standard ``OTEL_*`` variables, their metrics as Prometheus text (``metrics_text()``),
  as the command line's.
- ``terminus_kernel.langchain`` -- a LangChain ``AgentMiddleware`` that runs an agent under
  the kernel.
- ``terminus_kernel.agui`` -- ``agui_events(graph, input, thread_id=, run_id=)``: a LangChain
  agent run under that middleware as AG-UI events (``ag-ui-protocol``'s ``ag_ui.core``), for an
  ``EventEncoder`` of your own server; the report ends the stream (``RUN_FINISHED``), or the stop
  reason does (``RUN_ERROR``).
- ``terminus_kernel.pydantic_ai`` -- a Pydantic AI capability (and an agent wrapper) that runs
  an agent under the kernel; the report is on the run's result.
- ``terminus_kernel.openai_agents`` -- ``Terminus(policy).run(agent, input)``: an OpenAI Agents
  SDK agent run under the kernel (the kernel, not ``max_turns``, ends the run; the report is the
  result's attribute ``terminus``).

Every bad input raises :class:`ValueError` naming the field or JSON path at fault.
"""

from terminus_kernel._native import (
    Machine,
    __version__,
    is_non_answer,
    provider_error_kind,
    retry_after_ms,
    run_scenario,
)

from terminus_kernel.plan import (
    GeneratedPlan,
    PlanAgentContext,
    PlanError,
    generate_plan,
    run_plan,
)

__all__ = [
    "GeneratedPlan",
    "Machine",
    "PlanAgentContext",
    "PlanError",
    "generate_plan",
    "is_non_answer",
    "provider_error_kind",
    "retry_after_ms",
    "run_plan",
    "run_scenario",
    "__version__",
]
