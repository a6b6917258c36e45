"""lm-eval's results -> what a user reads: the score table (against the base where given, with the samples
that flipped either way), lm-eval's own files, MLflow at the checkpoint's step, TensorBoard."""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

AGGREGATE = {"average": statistics.fmean, "median": statistics.median, "max": max, "min": min, "sum": sum}
ACCURACY = re.compile(r"^(acc|acc_norm|exact_match|.*_acc)$")  # metric=accuracy keeps these


@dataclass(frozen=True)
class Score:
    task: str
    metric: str
    filter: str
    value: float
    n: int


def scores(results: dict, metric: str = "all", aggregation: str = "") -> list[Score]:
    """Every task's metrics as lm-eval reports them (`metric,filter` keys), kept by the recipe's metric;
    with an aggregation other than the average, recomputed from the per-sample values."""
    out = []
    for task, row in sorted(results["results"].items()):
        n = int(results.get("n-samples", {}).get(task, {}).get("effective", 0))
        for name, value in row.items():
            if "," not in name or "_stderr" in name or not isinstance(value, (int, float)):
                continue
            key, filt = name.split(",", 1)
            if metric == "exact_match" and not key.startswith("exact_match"):
                continue
            if metric == "accuracy" and not ACCURACY.match(key):
                continue
            if aggregation not in ("", "average") and task in results.get("samples", {}):
                values = [float(s[key]) for s in results["samples"][task] if s.get("filter") == filt and key in s]
                value = AGGREGATE[aggregation](values) if values else value
            out.append(Score(task, key, filt, float(value), n))
    return out


def per_sample(results: dict, score: Score) -> dict[int, float]:
    return {int(s["doc_id"]): float(s[score.metric]) for s in results.get("samples", {}).get(score.task, [])
            if s.get("filter") == score.filter and isinstance(s.get(score.metric), (int, float, bool))}


@dataclass(frozen=True)
class Flips:
    gained: list[int]  # doc ids the tuned model gets right and the base did not
    lost: list[int]


def flips(tuned: dict, base: dict, score: Score) -> Flips:
    mine, theirs = per_sample(tuned, score), per_sample(base, score)
    both = sorted(set(mine) & set(theirs))
    return Flips([d for d in both if mine[d] > theirs[d]], [d for d in both if mine[d] < theirs[d]])


def table(tuned: list[Score], base: dict[tuple, Score] | None, changes: dict[tuple, Flips]) -> str:
    head = ["task", "metric", "filter", "n", "score"] + (["base", "change", "gained", "lost"] if base is not None else [])
    rows = []
    for s in tuned:
        row = [s.task, s.metric, s.filter, str(s.n), f"{s.value:.4f}"]
        if base is not None:
            b = base.get((s.task, s.metric, s.filter))
            f = changes.get((s.task, s.metric, s.filter))
            row += [f"{b.value:.4f}", f"{s.value - b.value:+.4f}"] if b else ["-", "-"]
            row += [str(len(f.gained)), str(len(f.lost))] if f else ["-", "-"]
        rows.append(row)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    right = {3, 4, 5, 6, 7, 8}
    fmt = lambda r: "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(head), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def write_flips(path: Path, tuned: dict, base: dict, changes: dict[tuple, Flips]) -> None:
    """One line per flipped sample: the document, both answers, and which way it went."""
    with path.open("w") as f:
        for (task, metric, filt), flip in changes.items():
            docs = {int(s["doc_id"]): s for s in tuned["samples"].get(task, []) if s.get("filter") == filt}
            olds = {int(s["doc_id"]): s for s in base["samples"].get(task, []) if s.get("filter") == filt}
            for way, ids in (("gained", flip.gained), ("lost", flip.lost)):
                for d in ids:
                    f.write(json.dumps({"task": task, "metric": metric, "filter": filt, "doc_id": d, "flip": way,
                                        "target": docs[d].get("target"), "tuned": docs[d].get("filtered_resps"),
                                        "base": olds[d].get("filtered_resps"), "doc": docs[d].get("doc")},
                                       default=str) + "\n")


def metric_name(score: Score, prefix: str = "eval") -> str:
    """MLflow allows only letters, digits, _ - . / : and space in a metric's name."""
    return re.sub(r"[^\w\-./: ]", "_", f"{prefix}/{score.task}/{score.metric}/{score.filter}")


def log_mlflow(output, tuned: list[Score], base: dict[tuple, Score] | None, step: int, files: list[Path]) -> str:
    """Into `output.mlflow_run_id`'s run (the training run's) when given, else a new run; returns its id."""
    import mlflow

    if output.mlflow_tracking_uri:
        mlflow.set_tracking_uri(output.mlflow_tracking_uri)
    if output.mlflow_experiment_name and not output.mlflow_run_id:
        mlflow.set_experiment(output.mlflow_experiment_name)
    metrics = {metric_name(s): s.value for s in tuned if math.isfinite(s.value)}
    for s in tuned:
        if base and (b := base.get((s.task, s.metric, s.filter))):
            metrics[metric_name(s, "eval_change")] = s.value - b.value
    with mlflow.start_run(run_id=output.mlflow_run_id or None, run_name=output.mlflow_run_name or None) as run:
        mlflow.log_metrics(metrics, step=step)
        for file in files:
            mlflow.log_artifact(str(file), artifact_path=f"evaluation/step-{step}")
        return run.info.run_id


def log_tensorboard(directory: str, tuned: list[Score], step: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(directory) as writer:
        for s in tuned:
            writer.add_scalar(metric_name(s), s.value, step)
