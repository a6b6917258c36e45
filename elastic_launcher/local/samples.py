"""`action=samples`: a GRPO run's completions as a person reads them: a step's best and worst, each
with its prompt, its text (an agent's turns and its tools' replies), its reward and each reward function's score (from samples.jsonl, which
`training_config.logging.audit_samples` writes)."""

from __future__ import annotations

import math
import textwrap

from elastic_launcher.errors import LauncherError
from elastic_launcher.job import Job
from elastic_launcher.local.run import run_dir_of
from training.contract.records import METRICS, read_records


def run(job: Job) -> int:
    run_dir, settings = run_dir_of(job), job.settings.local
    if not (run_dir / METRICS).exists():
        raise LauncherError(f"{run_dir} holds no run yet: run it first (action=local with the same recipe and "
                            f"local.run_dir), or point local.run_dir at a run's directory")
    by_step = {r["step"]: r for r in read_records(run_dir, "samples.jsonl") if "readable" in r}  # a redone step: its last
    if not by_step:
        raise LauncherError(f"{run_dir} has no readable completions: run GRPO with "
                            f"recipes.training_config.logging.audit_samples=true (and local.run_dir=<its run dir>)")
    step = settings.step or max(by_step)
    if step not in by_step:
        raise LauncherError(f"local.step={step} is not a step of {run_dir}: it has steps {min(by_step)}..{max(by_step)}")
    rows = sorted(by_step[step]["readable"], key=lambda r: -math.inf if r["reward"] is None else r["reward"], reverse=True)
    scored = [r["reward"] for r in rows if r["reward"] is not None]  # None: a dropped verdict or timed-out tool
    mean = sum(scored) / max(len(scored), 1)
    print(f"step {step} of {run_dir}: {len(rows)} completions, mean reward {mean:.3f}")
    shown = min(settings.show, len(rows) // 2 or 1)
    for title, part in (("best", rows[:shown]), ("worst", rows[::-1][:shown])):
        print(f"\n{title}:")
        for r in part:
            scores = ", ".join(f"{name} {'-' if v is None else f'{v:.3g}'}" for name, v in r["rewards"].items())
            reward = "dropped" if r["reward"] is None else f"{r['reward']:.3f}"
            print(f"  reward {reward} ({scores}), sample {r['sample_id']}, completion {r['index']}")
            print(textwrap.indent(f"prompt: {r['prompt'].strip()}\n{_said(r)}", "    "))
    return 0


def _said(row: dict) -> str:
    """The completion, or an agent's turns: what the model said and what each tool replied."""
    if "turns" not in row:
        return f"completion: {row['completion'].strip()}"
    lines = []
    for n, turn in enumerate(row["turns"], 1):
        lines.append(f"turn {n}: {turn['model'].strip()}")
        lines += [f"  {r['name'] or '?'} -> {r['content'].strip()}" + ("" if r["status"] == "ok" else f" ({r['status']})")
                  for r in turn.get("replies", [])]
    return "\n".join(lines + [f"ended: {row['ended']}"])
