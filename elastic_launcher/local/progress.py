"""What a local run shows while it trains and where it ends: one line per step a person reads (the
full record stays in metrics.jsonl), the run's curves drawn into <run dir>/curves.png as it goes, and a
summary at the end."""

from __future__ import annotations

from pathlib import Path

from training.contract.records import human, read_records

CHART = "curves.png"
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
            draw(self.run_dir)
        return f"step {step}/{total}  {elapsed}{headline(record)}"


def step_rows(records: list[dict]) -> list[dict]:
    """Each step's record in step order; a step redone after a restart counts with its last one."""
    steps = {r["step"]: r for r in records if "step_time" in r}
    return [steps[s] for s in sorted(steps)]


def draw(run_dir: Path, rows: list[dict] | None = None) -> Path | None:
    """The run's curves (GRPO: its reward and each reward function, KL, completion length, loss; else
    the loss and the learning rate) against the step, a dashed line where the world size changed.
    `rows`: its step_rows where the caller has read them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = step_rows(read_records(run_dir)) if rows is None else rows
    if not rows:
        return None
    xs = [r["step"] for r in rows]
    grpo = "reward" in rows[0]
    panels = ([("reward", [k for k in rows[0] if k == "reward" or k.startswith("reward_") and k != "reward_std"
                           and not k.endswith("_s")]), ("KL to the reference", ["kl"]),
               ("completion tokens (mean)", ["completion_tokens_mean"]), ("loss", ["loss"])]
              if grpo else [("loss", ["loss"]), ("learning rate", ["lr"])])
    fig, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(9, 2.2 * len(panels)))
    resizes = [b["step"] for a, b in zip(rows, rows[1:]) if a["world_size"] != b["world_size"]]
    for ax, (title, keys) in zip(axes, panels):
        for key in keys:
            ax.plot(xs, [r.get(key) if isinstance(r.get(key), (int, float)) else float("nan") for r in rows],
                    ".-", lw=1, label=key)
        for s in resizes:
            ax.axvline(s - 0.5, color="black", ls="--", lw=0.8)
        ax.set_ylabel(title)
        if len(keys) > 1:
            ax.legend(fontsize=7)
    axes[-1].set_xlabel("step" + ("; dashed: the world size changed" if resizes else ""))
    fig.tight_layout()
    path = run_dir / CHART
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


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
    draw(run_dir, rows)
    outputs = [name for name in ("metrics.jsonl", "samples.jsonl", "hf", CHART) if (run_dir / name).exists()]
    return (f"{len(rows)} steps in {clock(wall)}; {key} {mean(values[:n]):.4g} over the first {n} steps, "
            f"{mean(values[-n:]):.4g} over the last {n}; in {run_dir}: {', '.join(outputs)}")
