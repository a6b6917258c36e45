"""What a local run shows while it trains and where it ends: one line per step a person reads (the
full record stays in metrics.jsonl), the run's curves drawn into <run dir>/curves.png as it goes, and a
summary at the end."""

from __future__ import annotations

from pathlib import Path

from training.contract.curves import CHART, draw, step_rows
from training.contract.records import human, read_records

REDRAW_EVERY = 10  # steps between two drawings of the chart while the run trains
WINDOW = 10  # steps of the summary's first and last window


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


def headline(record: dict) -> str:
    """The figures that matter for the method: GRPO's reward (with its spread) and KL, else the loss."""
    if "reward" in record:
        return f"reward {record['reward']:.3f} ±{record.get('reward_std', 0):.3f}  kl {record.get('kl', 0):.3f}"
    loss = record.get("loss")
    return f"loss {loss:.4f}" if isinstance(loss, float) else "loss -"


class Progress:
    """Turns the trainer's records into what the terminal shows."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.max_steps, self.started, self.first = run_dir, None, None, None

    def line(self, record: dict) -> str:
        if record.get("event") == "start":
            self.max_steps, self.started, self.first = record.get("max_steps"), record.get("process_start"), None
        if "step" not in record or "event" in record or "step_time" not in record:
            return human(record)
        step, now = record["step"], record.get("time", 0.0)
        if self.first is None:
            self.first = (step, now)
        done, total = step - self.first[0], self.max_steps or step
        left = f", ~{clock((now - self.first[1]) / done * (total - step))} left" if done else ""
        elapsed = f"{clock(now - self.started)}{left}  " if self.started else ""
        if step % REDRAW_EVERY == 0:
            draw(read_records(self.run_dir), self.run_dir / CHART)
        return f"step {step}/{total}  {elapsed}{headline(record)}"


def summary(run_dir: Path) -> str:
    """Where a finished run ended: its steps and wall time, the method's figure over the first and the
    last steps, and where its outputs are."""
    records = read_records(run_dir)
    rows = step_rows(records)
    if not rows:
        return f"no steps in {run_dir}"
    key = "reward" if "reward" in rows[0] else "loss"
    values = [r[key] for r in rows if isinstance(r.get(key), float)]
    n = min(WINDOW, max(len(values) // 2, 1))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    wall = rows[-1]["time"] - min(r["process_start"] for r in records if r.get("event") == "start")
    draw(records, run_dir / CHART)
    outputs = [name for name in ("metrics.jsonl", "samples.jsonl", "hf", CHART) if (run_dir / name).exists()]
    return (f"{len(rows)} steps in {clock(wall)}; {key} {mean(values[:n]):.4g} over the first {n} steps, "
            f"{mean(values[-n:]):.4g} over the last {n}; in {run_dir}: {', '.join(outputs)}")
