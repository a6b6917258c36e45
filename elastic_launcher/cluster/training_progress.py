"""Where a training run is, from the trainer's own records (training.contract.records): the step, the loss,
the speed, the size it trains at, its resizes and failures, its newest checkpoint, an ETA, and
whether it is between sizes. Read from a pod's log by `action=status` and `action=list`; pure
functions of the records, so they are tested without a cluster."""

from __future__ import annotations

from dataclasses import dataclass, field

from elastic_launcher.words import plural
from training.contract.curves import CHART, REDRAW_S
from training.contract.judge import failed_verdicts

RECENT_STEPS = 20  # the speed and the ETA come from the last steps of the current launch
RECENT_WARNINGS = 3  # the warnings status shows: the newest of the current launch


@dataclass(frozen=True)
class JobProgress:
    state: str  # training | loading | stopping | finished | no progress yet
    step: int = 0
    max_steps: int | None = None
    epochs: float | None = None  # when the recipe counts epochs: epochs done so far
    loss: float | None = None
    eval_loss: float | None = None
    reward_accuracy: float | None = None
    reward: float | None = None  # GRPO: the step's mean reward, its spread and the KL to the reference
    reward_std: float | None = None
    kl: float | None = None
    tokens_per_s: float | None = None
    tokens_per_s_per_device: float | None = None
    world_size: int | None = None
    nodes: int | None = None
    checkpoint_step: int | None = None
    checkpoint_time: float | None = None
    eta_s: float | None = None
    history: list[dict] = field(default_factory=list)  # {time, step, from, to, cause} per restart
    since: float | None = None  # when the current state began
    run_dir: str | None = None  # the trainer's, on the job's volume
    judge: dict = field(default_factory=dict)  # GRPO with an LLM judge: its account of the last step (judge_*)
    warnings: list[str] = field(default_factory=list)  # the trainer's newest warnings since it last started


def progress(records: list[dict]) -> JobProgress:
    if not records:
        return JobProgress("no progress yet")
    starts = [r for r in records if r.get("event") == "start"]
    start = starts[-1] if starts else {}
    launch = start.get("launch")
    steps = [r for r in records if "loss" in r and "step" in r]
    current = [r for r in steps if r.get("launch") == launch]
    last = steps[-1] if steps else {}
    evals = [r for r in records if "eval_loss" in r]
    checkpoints = [r for r in records if r.get("event") == "checkpoint"]
    resume = next((r for r in reversed(records) if r.get("event") == "resume"), None)
    events = [r for r in records if "event" in r]
    final = events[-1] if events else {}
    max_steps = start.get("max_steps")
    if final.get("event") == "exit" and max_steps and last.get("step") == max_steps:
        state, since = "finished", final["time"]
    elif final.get("event") == "stop":
        state, since = "stopping", final["time"]
    elif start and not current:
        state, since = "loading", start.get("time")
    else:
        state, since = "training", (current[0]["time"] if current else None)
    recent = current[-RECENT_STEPS:]
    speed = eta = None
    if len(recent) >= 2:
        speed = (recent[-1]["step"] - recent[0]["step"]) / max(recent[-1]["time"] - recent[0]["time"], 1e-9)
    elif recent:
        speed = 1 / max(recent[-1].get("step_time", 0) or 1e-9, 1e-9)
    if speed and max_steps and state == "training":
        eta = (max_steps - last.get("step", 0)) / speed
    epochs = None
    if start.get("max_epochs") and max_steps:
        epochs = start["max_epochs"] * last.get("step", 0) / max_steps
    return JobProgress(
        state=state, step=last.get("step", 0), max_steps=max_steps, epochs=epochs, loss=last.get("loss"),
        eval_loss=evals[-1]["eval_loss"] if evals else None,
        reward_accuracy=(evals[-1] if evals else last).get("eval_rewards_accuracy", last.get("rewards_accuracy")),
        tokens_per_s=last.get("tokens_per_s"), tokens_per_s_per_device=last.get("tokens_per_s_per_device"),
        world_size=start.get("world_size"), nodes=start.get("nodes"),
        checkpoint_step=checkpoints[-1]["step"] if checkpoints else None,
        checkpoint_time=checkpoints[-1]["time"] if checkpoints else None,
        reward=last.get("reward"), reward_std=last.get("reward_std"), kl=last.get("kl"),
        eta_s=eta, run_dir=start.get("run_dir"), judge={k: v for k, v in last.items() if k.startswith("judge_")},
        history=list((resume or {}).get("history") or start.get("history") or []), since=since,
        warnings=[r["message"] for r in events if r.get("event") == "warning" and r.get("launch") == launch][-RECENT_WARNINGS:])


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def judge_line(j: dict) -> str:
    """A step's account of its LLM judge (training.rl.judge.Costs) in a line."""
    failed = failed_verdicts(j)
    return (f"judge, last step: {j.get('judge_calls', 0):.0f} calls, {j.get('judge_cached', 0):.0f} from the ledger, "
            f"{j.get('judge_retries', 0):.0f} retries, failed {', '.join(f'{n} {k}' for k, n in failed.items()) or 0}, "
            f"{j.get('judge_dropped', 0):.0f} dropped; {j.get('judge_input_tokens', 0):,.0f} tokens in, "
            f"{j.get('judge_output_tokens', 0):,.0f} out; {j.get('judge_s', 0):.1f} s of judging, "
            f"{j.get('judge_wait_s', 0):.1f} s waited by the step")


def describe(p: JobProgress, now: float, target_nodes: str | None = None) -> list[str]:
    """The lines `action=status` prints below the job and pod rows."""
    if p.state == "no progress yet":
        return ["training: no progress line in the rank-0 log yet (the job is starting: pulling the image, "
                "rendezvous or loading)"]
    moving = f", operator moving to {target_nodes}" if target_nodes and str(p.nodes) != target_nodes else ""
    of = f"/{p.max_steps}" if p.max_steps else ""
    epochs = f" (epoch {p.epochs:.2f})" if p.epochs is not None else ""
    lines = [f"training: {p.state} for {duration(now - p.since) if p.since else '-'}; step {p.step}{of}{epochs} at "
             f"{plural(p.nodes, 'node')} ({plural(p.world_size, 'process')}){moving}"]
    numbers = []
    if p.loss is not None:
        numbers.append(f"loss {p.loss:.4g}")
    if p.eval_loss is not None:
        numbers.append(f"eval loss {p.eval_loss:.4g}")
    if p.reward is not None:
        numbers.append(f"reward {p.reward:.3f} ±{p.reward_std or 0:.3f}, kl {p.kl or 0:.3f}")
    if p.reward_accuracy is not None:
        numbers.append(f"reward accuracy {p.reward_accuracy:.2f}")
    if p.tokens_per_s is not None:
        numbers.append(f"{p.tokens_per_s:,.0f} tokens/s ({p.tokens_per_s_per_device:,.0f} per device)")
    if numbers:
        lines.append("  " + ", ".join(numbers))
    if p.judge:
        lines.append("  " + judge_line(p.judge))
    lines += [f"  warning: {w}" for w in p.warnings]
    checkpoint = (f"step {p.checkpoint_step}, {duration(now - p.checkpoint_time)} ago" if p.checkpoint_step is not None
                  else "none yet")
    eta = f"; ETA {duration(p.eta_s)} at the current speed" if p.eta_s is not None else ""
    lines.append(f"  last complete checkpoint: {checkpoint}{eta}")
    resizes = [h for h in p.history if h.get("cause") == "resize"]
    failures = [h for h in p.history if h.get("cause") == "failure"]
    lines.append(f"  resizes: {len(resizes)}, failures: {len(failures)}" +
                 "".join(f"\n    {h['cause']} at step {h['step']}: {h['from']} -> {h['to']} processes, "
                         f"{duration(now - h['time'])} ago" for h in p.history[-5:]))
    if p.run_dir:
        lines.append(f"  run directory, on the job's volume: {p.run_dir} (metrics.jsonl; {CHART}, the whole run's "
                     f"curves, redrawn at a checkpoint every {REDRAW_S / 60:.0f} min and at the end)")
    return lines
