"""What a rehearsal cost and whether it was invisible: per-transition downtime, capacity
utilization, the comparison with a fixed-size run, and charts: the timeline (rehearsal.png) and the
run's curves against the step, resizes marked (curves.png, a local run's drawing)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from elastic_launcher.local.timeline import Timeline
from elastic_launcher.words import plural
from training.contract.curves import CHART, draw
from training.contract.judge import NAME as JUDGE
from training.contract.records import committed, read_records


@dataclass
class Transition:
    cause: str  # "resize" (SIGUSR1) or "failure" (a worker SIGKILLed)
    from_nodes: int
    to_nodes: int
    signal_to_exit_s: float | None
    checkpoint_save_s: float | None
    checkpoint_bytes: int | None
    relaunch_to_first_step_s: float | None  # relaunch -> the first step at the new size starts
    downtime_s: float | None  # end of the last step at the old size -> start of the first at the new one
    steps_recomputed: int
    load_s: float | None = None  # of the relaunch: reading the checkpoint (allocation, read, apply)
    read_mb: dict | None = None  # what the load read from each tier (node memory, shared volume)
    restart: str | None = None  # "in place" (rank 0's process kept through the resize) or "process"
    resumed_from: str | None = None  # "peers" (the peer copies) or "durable" (the checkpoint), and its step


@dataclass
class Report:
    transitions: list[Transition]
    utilization: float
    node_seconds_used: float
    node_seconds_available: float
    steps: int
    first_start_s: float | None = None  # first launch -> its first step starts (no checkpoint to read)
    compared_metric: str = "loss"  # the method's (training.contract.methods): GRPO's is the entropy
    max_rel_diff: float | None = None  # of the compared metric, over the steps
    samples_identical: bool | None = None  # the consumed sample ids, and GRPO's completions
    first_differing_step: int | None = None  # the first step whose samples differ from the fixed-size run's
    first_input_difference: str | None = None  # a judge's verdict or an environment's reply that differed first
    matched: bool | None = None  # None: no comparison run
    reordering_nodes: int | None = None  # the size of a second fixed-size run, where one was needed
    reordering_rel_diff: float | None = None  # how far it drifted from the first: float32's reordering alone

    def summary(self) -> str:
        header = ("#", "cause", "nodes", "restart", "signal->exit", "ckpt save", "ckpt MB", "relaunch->step", "load",
                  "from", "read MB", "downtime", "redo")
        fmt = lambda v, unit="s": "-" if v is None else f"{v:.2f}{unit}"  # noqa: E731
        tiers = lambda mb: "-" if not mb else ", ".join(f"{v:.0f} {k}" for k, v in mb.items() if v)  # noqa: E731
        rows = [header] + [(str(i + 1), t.cause, f"{t.from_nodes}->{t.to_nodes}", t.restart or "-", fmt(t.signal_to_exit_s),
                            fmt(t.checkpoint_save_s), fmt(t.checkpoint_bytes and t.checkpoint_bytes / 1e6, ""),
                            fmt(t.relaunch_to_first_step_s), fmt(t.load_s), t.resumed_from or "-", tiers(t.read_mb) or "-", fmt(t.downtime_s),
                            str(t.steps_recomputed)) for i, t in enumerate(self.transitions)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        lines.append(f"capacity utilization: {self.utilization:.1%} ({self.node_seconds_used:.0f} of "
                     f"{self.node_seconds_available:.0f} node-seconds), {self.steps} steps")
        if self.matched is not None:
            verdict = "MATCHED" if self.matched else "DIFFERED"
            what = "consumed sample ids" + (" and completions" if self.compared_metric != "loss" else "")
            within = "" if self.reordering_rel_diff is None else (
                f", {'within' if self.matched else 'beyond'} float32's reordering (a fixed-size run at "
                f"{plural(self.reordering_nodes, 'node')} drifts up to {self.reordering_rel_diff:.2e} from it; a step "
                f"may differ up to {REORDERING_MARGIN:g}x what it had by then)")
            lines.append(f"vs fixed-size run: {verdict}: max relative {self.compared_metric} difference "
                         f"{self.max_rel_diff:.2e}{within}, {what} {'identical' if self.samples_identical else 'DIFFERENT'}"
                         + (f" from step {self.first_differing_step}" if self.first_differing_step else "")
                         + (f"; first to differ: {self.first_input_difference}, not the trainer's doing"
                            if self.first_input_difference else ""))
        return "\n".join(lines)


def _transition(records: list[dict], events: list[dict], prev: int, cur: int) -> Transition:
    """What happened between launch `prev` and launch `cur` (indices into the timeline)."""
    launched, relaunched = events[prev], events[cur]
    between = events[prev + 1 : cur]
    cause = next((e for e in between if e["event"] in ("signal", "kill")), None)
    ended = next((e for e in between if e["event"] in ("exit", "failure")), None)
    failed = any(e["event"] in ("kill", "failure") for e in between)
    began = (cause or ended or relaunched)["time"]
    checkpoint = next((r for r in records if r.get("event") == "checkpoint"
                       and began <= r["time"] <= (ended or relaunched)["time"] + 1), None)
    old_steps = [r for r in records if "loss" in r and launched["time"] <= r["time"] <= relaunched["time"]]
    to_first_step = _first_start(records, relaunched)
    first_start = relaunched["time"] + to_first_step if to_first_step is not None else None
    resume = next((r for r in records if r.get("event") == "resume" and r["time"] >= relaunched["time"]), None)
    start = next((r for r in records if r.get("event") == "start" and r["time"] >= relaunched["time"]), None)
    resumed = resume["step"] if resume else 0
    return Transition(
        cause="failure" if failed else "resize", from_nodes=launched["nodes"], to_nodes=relaunched["nodes"],
        signal_to_exit_s=ended["time"] - cause["time"] if cause and ended else None,
        checkpoint_save_s=checkpoint["seconds"] if checkpoint else None,
        checkpoint_bytes=checkpoint["bytes"] if checkpoint else None,
        relaunch_to_first_step_s=to_first_step,
        downtime_s=first_start - old_steps[-1]["time"] if first_start is not None and old_steps else None,
        steps_recomputed=max(0, max((r["step"] for r in old_steps), default=0) - resumed),
        load_s=sum(v for k, v in resume.items() if k.startswith("load_")) if resume else None,
        read_mb=resume.get("read_mb") if resume else None,
        restart=("in place" if start.get("same_process") else "process") if start else None,
        resumed_from=f"{resume.get('source', 'durable')} step {resume['step']}" if resume else "start")


STRICT = 1e-5  # the compared metric's relative difference a resized run may show without more evidence
REORDERING_MARGIN = 4.0  # beyond STRICT: times the drift of a fixed-size run at another size, by the same step


def relative_differences(run_dir: Path, reference_dir: Path, metric: str) -> dict[int, float]:
    """Per step of the reference, the run's relative difference from it (absolute where the reference's
    value is 0; inf where the run lacks the step)."""
    got, want = (committed(d, "metrics.jsonl", metric) for d in (run_dir, reference_dir))
    return {s: abs(got.get(s, float("inf")) - v) / abs(v) if v else abs(got.get(s, float("inf")) - v)
            for s, v in want.items()}


def within_reordering(resized: dict[int, float], reordered: dict[int, float]) -> bool:
    """Whether every step of a resized run differs from the fixed-size run by no more than float32's
    reordering explains: STRICT, or REORDERING_MARGIN times the largest difference a fixed-size run at
    another size (the same data and steps, sums in another order) showed by that step. A chaotic run
    amplifies a reordering step by step, so the bound grows with it; a wrong sample or weight jumps
    far past it at the step it happens."""
    envelope = 0.0
    for step in sorted(resized):
        envelope = max(envelope, reordered.get(step, 0.0))
        if not resized[step] <= max(STRICT, REORDERING_MARGIN * envelope):
            return False
    return True


def build(run_dir: Path, timeline: Timeline, reference_dir: Path | None, compared_metric: str = "loss",
          reordering: tuple[int, Path] | None = None) -> Report:
    """The rehearsal's report; with `reference_dir`, judged against the fixed-size run there, and with
    `reordering` (nodes, directory), against what float32's reordering alone does at another size."""
    records, events = read_records(run_dir), timeline.events
    launches = [i for i, e in enumerate(events) if e["event"] == "launch"]
    transitions = [_transition(records, events, prev, cur) for prev, cur in zip(launches, launches[1:])]

    used, available = _node_seconds(events)
    steps = committed(run_dir, "metrics.jsonl", "loss")
    report = Report(transitions, used / available if available else 0.0, used, available, len(steps),
                    _first_start(records, events[launches[0]]) if launches else None, compared_metric)
    if reference_dir is not None:
        resized = relative_differences(run_dir, reference_dir, compared_metric)
        report.max_rel_diff = max(resized.values(), default=float("inf"))
        report.first_differing_step = first_difference(run_dir, reference_dir)
        report.first_input_difference = first_input_difference(run_dir, reference_dir, report.first_differing_step)
        report.samples_identical = report.first_differing_step is None
        same_steps = set(committed(run_dir, "metrics.jsonl", compared_metric)) == set(resized)
        report.matched = report.samples_identical and same_steps and report.max_rel_diff <= STRICT
        if reordering is not None and report.samples_identical and same_steps:
            report.reordering_nodes, reordering_dir = reordering
            reordered = relative_differences(reordering_dir, reference_dir, compared_metric)
            report.reordering_rel_diff = max(reordered.values(), default=float("inf"))
            report.matched = within_reordering(resized, reordered)
    (run_dir / "rehearsal_report.json").write_text(json.dumps(asdict(report), indent=1))
    chart(run_dir / "rehearsal.png", records, events, timeline.started)
    draw(records, run_dir / CHART)  # the run's curves against the step, as a local run draws them
    return report


def first_difference(run_dir: Path, reference_dir: Path) -> int | None:
    """The first step whose consumed sample ids or completions (GRPO's) differ between two runs."""
    differing = [step for key in ("sample_ids", "completions")
                 for ours, theirs in [(committed(run_dir, "samples.jsonl", key), committed(reference_dir, "samples.jsonl", key))]
                 for step in set(ours) | set(theirs) if ours.get(step) != theirs.get(step)]
    return min(differing, default=None)


def first_input_difference(run_dir: Path, reference_dir: Path, until: int | None) -> str | None:
    """What the trainer does not make that differs first between two runs, up to step `until` (their
    first differing samples) or the end: a reward given to the same completion (a judge's verdict),
    or an environment's reply to the same turn. None where the trainer's own output differs first."""
    ours, theirs = (committed(d, "samples.jsonl", "readable") for d in (run_dir, reference_dir))
    for step in sorted(s for s in set(ours) & set(theirs) if until is None or s <= until):
        mine = {(r["sample_id"], r["index"]): r for r in ours[step]}
        for other in theirs[step]:
            key = (other["sample_id"], other["index"])
            if (row := mine.get(key)) is None:
                continue
            what = f"sample {key[0]}'s completion {key[1]} at step {step}"
            for turn, (a, b) in enumerate(zip(row.get("turns", []), other.get("turns", []))):
                if a["model"] != b["model"]:
                    break
                if a.get("replies") != b.get("replies"):
                    return f"the environment's reply in turn {turn + 1} of {what}"
            if row["completion"] == other["completion"] and row["rewards"] != other["rewards"]:
                name = next(n for n in row["rewards"] if row["rewards"][n] != other["rewards"].get(n))
                label = "the judge's verdict" if name == JUDGE else f"the reward {name}"
                return f"{label} on {what} ({row['rewards'][name]} here, {other['rewards'].get(name)} in the fixed-size run)"
    return None


def _first_start(records: list[dict], launch: dict) -> float | None:
    """Seconds from `launch` to the start of the first step after it."""
    first = next((r for r in records if "loss" in r and r["time"] >= launch["time"]), None)
    return first["time"] - first["step_time"] - launch["time"] if first else None


def _node_seconds(events: list[dict]) -> tuple[float, float]:
    """(nodes held by the job x seconds, nodes available x seconds) from first launch to done. Nodes
    a job still holds while it shuts down gracefully count as available until released."""
    end = next((e["time"] for e in reversed(events) if e["event"] in ("done", "failure", "exit")), events[-1]["time"])
    used = available = 0.0
    running, capacity, t_prev = 0, 0, events[0]["time"]
    for e in events + [{"time": end, "event": "end"}]:
        dt = max(0.0, min(e["time"], end) - t_prev)
        used, available = used + running * dt, available + max(capacity, running) * dt
        t_prev = max(t_prev, min(e["time"], end))
        if e["event"] == "capacity":
            capacity = e["available"]
        elif e["event"] == "kill":  # the nodes died with their workers
            capacity, running = e["available"], max(0, running - e.get("nodes", 1))
        elif e["event"] == "launch":
            running = e["nodes"]
        elif e["event"] in ("exit", "failure", "done"):
            running = 0
    return used, available


def chart(path: Path, records: list[dict], events: list[dict], t0: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r for r in records if "loss" in r]
    fig, (ax_tps, ax_loss) = plt.subplots(2, 1, sharex=True, figsize=(11, 6.5))
    for launch_id in dict.fromkeys(r["launch"] for r in steps):  # one line per launch: gaps are downtime
        mine = [r for r in steps if r["launch"] == launch_id]
        ax_tps.plot([r["time"] - t0 for r in mine], [r["tokens_per_s"] for r in mine], ".-", lw=1, color="tab:blue")
        ax_loss.plot([r["time"] - t0 for r in mine], [r["loss"] for r in mine], ".-", lw=1, color="tab:green")
    launches = [e for e in events if e["event"] == "launch"]
    end = events[-1]["t"]
    colors = plt.get_cmap("Blues")
    for i, launch in enumerate(launches):
        stop = next((e["t"] for e in events if e["t"] > launch["t"] and e["event"] in ("signal", "kill", "failure",
                                                                                     "done")), end)
        for ax in (ax_tps, ax_loss):
            ax.axvspan(launch["t"], stop, color=colors(0.15 + 0.2 * launch["nodes"]), alpha=0.35, lw=0)
        ax_tps.text(launch["t"], ax_tps.get_ylim()[1] if steps else 1, f" {plural(launch['nodes'], 'node')}", va="top",
                    fontsize=8)
    for e in events:
        if e["event"] in ("signal", "kill"):
            for ax in (ax_tps, ax_loss):
                ax.axvline(e["t"], color="red" if e["event"] == "kill" else "black", ls="--", lw=0.8)
    ax_tps.set_ylabel("tokens/s (global)")
    ax_loss.set_ylabel("loss")
    ax_loss.set_xlabel("wall time (s); shading = world size, dashed = resize (black) / node failure (red)")
    ax_tps.set_title("Elastic rehearsal")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
