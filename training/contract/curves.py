"""The chart of a run's curves, drawn from its records (training.contract.records) by whoever holds
them: the trainer into its run directory at every checkpoint and at the end, a local run as it goes,
the rehearsal's report, and `action=status` from the rank-0 log it reads. Torch-free."""

from __future__ import annotations

import os
from pathlib import Path

CHART = "curves.png"
REDRAW_S = 300.0  # the trainer redraws its chart at a checkpoint once it is this old (training.runtime.metrics)


def step_rows(records: list[dict]) -> list[dict]:
    """Each step's record in step order; a step redone after a restart counts with its last one."""
    steps = {r["step"]: r for r in records if "step_time" in r}
    return [steps[s] for s in sorted(steps)]


def panels(first: dict) -> list[tuple[str, list[str]]]:
    """(title, keys) per panel: GRPO's reward and each reward function, KL, completion length and loss;
    any other method's loss and learning rate."""
    if "reward" not in first:
        return [("loss", ["loss"]), ("learning rate", ["lr"])]
    rewards = [k for k in first if k == "reward" or k.startswith("reward_") and k != "reward_std"
               and not k.endswith("_s")]
    return [("reward", rewards), ("KL to the reference", ["kl"]),
            ("completion tokens (mean)", ["completion_tokens_mean"]), ("loss", ["loss"])]


def draw(records: list[dict], path: Path) -> Path | None:
    """The curves of `records` against the step, a dashed line where the world size changed, written
    to `path` whole (a reader never sees half a file); None when there is no step to draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # not pyplot: no global state, safe beside a training loop

    rows = step_rows(records)
    if not rows:
        return None
    xs = [r["step"] for r in rows]
    chosen = panels(rows[0])
    fig = Figure(figsize=(9, 2.2 * len(chosen)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(chosen), 1, sharex=True)
    resizes = [b["step"] for a, b in zip(rows, rows[1:]) if a.get("world_size") != b.get("world_size")]
    for ax, (title, keys) in zip(axes, chosen):
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.png")
    fig.savefig(partial, dpi=100)
    os.replace(partial, path)
    return path
