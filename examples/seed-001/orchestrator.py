"""Seed 001's orchestrator in Python, the twin of orchestrator.ts: an ``OrchestratorAgent`` that
asks a ``PlanGenerator`` (a model, with the seed's static fallback) for a plan over the registry
of agents, and an ``Executor`` that runs it with a ``ContextManager`` keeping the plan and the
progress in files (the seed kept them on S3), on the ``terminus-kernel`` package's
``generate_plan`` and ``run_plan`` (docs/plans.md, "From Node and Python").

Offline (scripted planner and agents):  python examples/seed-001/orchestrator.py
On the project's llama-server:          python examples/seed-001/orchestrator.py --model http://127.0.0.1:8089
Options: --task TEXT, --execution ID (the same id again goes on from the kept files), --context DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from terminus_kernel import PlanAgentContext, generate_plan, run_plan

Model = Callable[[list[dict[str, str]]], Awaitable[dict[str, Any]]]


@dataclass
class AgentDefinition:
    id: str
    description: str
    error_handling: str  # "fail" or "skip"
    retryable: bool
    estimated_duration_ms: int
    task: str
    degraded_result: str | None = None


REGISTRY = [
    AgentDefinition("research", "Collects facts about the company and its market.", "skip", False, 20_000, "Do the research part of the task.", "no facts found"),
    AgentDefinition("competitors", "Lists the main competitors, using the facts research found.", "fail", True, 30_000, "Do the competitors part of the task."),
    AgentDefinition("pricing", "Compares the company's prices with its competitors' prices.", "skip", False, 20_000, "Do the pricing part of the task.", "no pricing data"),
    AgentDefinition("reviews", "Optional: reads customer reviews; it may be skipped and then gives no result.", "skip", False, 20_000, "Do the reviews part of the task."),
    AgentDefinition("risks", "Names the main risks of growing, from the market facts and the competitors.", "fail", False, 20_000, "Do the risks part of the task."),
    AgentDefinition("summary", "Writes the final report from the results of the other agents.", "fail", True, 30_000, "Do the summary part of the task."),
]

#: The seed's static plan, run when the model writes no valid one.
FALLBACK = [
    {"id": "research"},
    {"id": "competitors", "depends_on": ["research"], "task": "List the competitors of the company in {research}"},
    {"id": "summary", "depends_on": ["competitors"], "task": "Write the report from {competitors}"},
]


class ContextManager:
    """Keeps a plan's state between invocations (the seed's S3 context; here a file)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any] | None:
        return json.loads(self.path.read_text()) if self.path.exists() else None

    def save(self, value: dict[str, Any]) -> None:
        # Written whole, then renamed: a process killed mid-write leaves the last state.
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(value))
        tmp.replace(self.path)


class PlanGenerator:
    """Asks the model for a plan over the registry; rejected plans go back with their problems."""

    def __init__(self, registry: list[AgentDefinition], model: Model) -> None:
        self.registry = registry
        self.model = model

    async def generate(self, task: str, execution: str) -> Any:
        members = []
        for a in self.registry:
            member: dict[str, Any] = {
                "id": a.id,
                "description": a.description,
                "task": a.task,
                "on_error": a.error_handling,
                "retryable": a.retryable,
                "estimated_duration_ms": a.estimated_duration_ms,
            }
            if a.degraded_result is not None:
                member["degraded_result"] = a.degraded_result
            members.append(member)
        file = {
            "name": "seed-001",
            "limits": {"max_phases": 6, "execution_timeout_ms": 600_000, "max_concurrency": 2},
            "registry": members,
            "generator": {"max_attempts": 3},
            "fallback": FALLBACK,
        }
        return await generate_plan(file, task, model=self.model, execution=execution)


class Executor:
    """Runs a plan's agents: each asks the model (or its script) to do its part."""

    def __init__(self, registry: list[AgentDefinition], work: Callable[..., Awaitable[str]], context: ContextManager) -> None:
        self.registry = registry
        self.work = work
        self.context = context

    async def execute(self, plan: dict[str, Any], generation: dict[str, Any], execution: str) -> dict[str, Any]:
        used = {a["id"] for a in plan["agents"]}

        def agent(definition: AgentDefinition) -> Callable[[str, PlanAgentContext], Awaitable[str]]:
            return lambda task, context: self.work(definition, task, context)

        return await run_plan(
            plan,
            agents={a.id: agent(a) for a in self.registry if a.id in used},
            execution=execution,
            generation=generation,
            progress=self.context.load(),
            on_progress=self.context.save,
            on_event=lambda e: print(f"terminus: {e['line']}", file=sys.stderr),
        )


class OrchestratorAgent:
    """The seed's entry point: a task in, the plan's report out."""

    def __init__(self, generator: PlanGenerator, executor: Executor, plans: ContextManager) -> None:
        self.generator = generator
        self.executor = executor
        self.plans = plans

    async def handle(self, task: str, execution: str) -> dict[str, Any]:
        # A plan already written for this execution (an invocation cut short) runs again as it
        # was: the model is not asked twice.
        kept = self.plans.load()
        if kept is None:
            generated = await self.generator.generate(task, execution)
            g = generated.generation
            print(f"terminus: plan {g['source']} after {g['attempts']} model call(s)", file=sys.stderr)
            if generated.plan is None:
                return generated.report
            kept = {"plan": generated.plan, "generation": g}
            self.plans.save(kept)
        return await self.executor.execute(kept["plan"], kept["generation"], execution)


def served(base_url: str, max_tokens: int) -> Model:
    """The model on an OpenAI-compatible server (llama-server's ``/v1/chat/completions``)."""

    def call(messages: list[dict[str, str]]) -> dict[str, Any]:
        body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0.8}).encode()
        request = urllib.request.Request(f"{base_url}/v1/chat/completions", data=body, headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            choice = json.loads(response.read())["choices"][0]
        return {"text": choice["message"].get("content") or "", "cut": choice.get("finish_reason") == "length"}

    async def model(messages: list[dict[str, str]]) -> dict[str, Any]:
        return await asyncio.to_thread(call, messages)

    return model


def scripted(replies: list[str]) -> Model:
    """Replies in turn, the last one again (the offline planner)."""
    calls = 0

    async def model(messages: list[dict[str, str]]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"text": replies[min(calls, len(replies)) - 1]}

    return model


#: What each agent says offline; `reviews` has no data (it is skipped: an optional agent).
SCRIPTS = {
    "research": "facts: a small bakery chain, 12 shops, growing demand for vegan bread",
    "competitors": "competitors: BreadCo (48 shops), Loaf & Co (9 shops)",
    "pricing": "pricing: 8 % above BreadCo, level with Loaf & Co",
    "risks": "risks: BreadCo opening vegan lines; flour prices",
}

#: The offline planner first writes a plan with a cycle, then the plan it meant.
PLANNER = [
    json.dumps({"agents": [
        {"id": "research", "depends_on": ["summary"], "task": "Find the facts."},
        {"id": "summary", "depends_on": ["research"], "task": "Write the report from {research}"},
    ]}),
    json.dumps({"agents": [
        {"id": "research", "depends_on": [], "task": "Find the facts about the bakery chain."},
        {"id": "competitors", "depends_on": ["research"], "task": "List the competitors of the company in {research}"},
        {"id": "reviews", "depends_on": [], "task": "Read the customer reviews."},
        {"id": "risks", "depends_on": ["research", "competitors"], "task": "Name the risks from {research} and {competitors}"},
        {"id": "summary", "depends_on": ["competitors", "risks"], "task": "Write the report from {competitors} and {risks}"},
    ]}),
]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="Write a market report for a bakery chain that wants to grow.")
    parser.add_argument("--execution", default=f"seed-001-{int(time.time() * 1000)}")
    parser.add_argument("--context", default=".")
    parser.add_argument("--model")
    args = parser.parse_args()
    writer = served(args.model, 200) if args.model else None

    async def work(agent: AgentDefinition, task: str, context: PlanAgentContext) -> str:
        if writer is not None:
            context.used["model_calls"] += 1
            reply = await writer([
                {"role": "system", "content": f"You are the {agent.id} agent: {agent.description} Answer in at most three sentences."},
                {"role": "user", "content": task},
            ])
            # run_plan holds a text result to the kernel's rule of what an answer is: an empty
            # reply or a hand-back fails the attempt.
            return reply["text"].strip()
        if agent.id == "summary":
            return f"report: {task}"
        if agent.id not in SCRIPTS:
            raise RuntimeError(f"{agent.id}: no data")
        return SCRIPTS[agent.id]

    folder = Path(args.context)
    orchestrator = OrchestratorAgent(
        PlanGenerator(REGISTRY, served(args.model, 800) if args.model else scripted(PLANNER)),
        Executor(REGISTRY, work, ContextManager(folder / f"{args.execution}.progress.json")),
        ContextManager(folder / f"{args.execution}.plan.json"),
    )
    report = await orchestrator.handle(args.task, args.execution)
    print(json.dumps(report))
    return 0 if report["outcome"] == "complete" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
