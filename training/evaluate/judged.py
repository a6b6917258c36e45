"""The LLM-as-judge evaluation: each process judges its share of the generations (row i is process i mod N's)
through the project's judge, whose ledger keeps every verdict by its content; once every process is through
(a barrier), rank 0 reads them all back from the ledger (asking nothing) and reports. Restarted at any size,
no verdict is asked twice."""

from __future__ import annotations

import json
import os
import socket
import statistics
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from training.contract import buckets
from training.contract.judge_evaluation import (Generation, JudgedMetric, JudgeEvalRecipe, check_generations,
                                                judged_metrics, read_generations)
from training.evaluate import scores
from training.rl.judge import Judge

BARRIER_TIMEOUT = timedelta(days=1)  # a judge with a tight rate limit may take hours over a large set


@dataclass(frozen=True)
class MetricVerdicts:
    metric: str
    verdicts: list[float | None]  # per row; None: failed after its retries
    calls: int  # asked of the judge by this start's processes
    kept: int  # found in the ledger


def generations(uri: str, key: str, cache: Path) -> list[Generation]:
    path = buckets.download(key, uri, cache) if buckets.is_s3(uri) else Path(uri)
    return read_generations(path, key)


def judge_rows(metric: JudgedMetric, rows: list[Generation], base: list[Generation] | None, out: Path,
               indices: list[int], rank: int, world: int) -> tuple[list[float | None], object]:
    """The verdicts of `indices`' rows (the ledger's where it has them) and what asking them cost."""
    judge = Judge(metric.settings, rank, world, out, "evaluation", f"{socket.gethostname()}-{os.getpid()}")
    try:
        # Faithfulness grades against the row's reference answer, WinRate against the base model's answer
        references = [base[i].response if metric.name == "WinRate" else rows[i].reference for i in indices]
        columns = {"rubric": [metric.rubric] * len(indices)} if metric.rubric else {}
        future = judge.submit([rows[i].prompt for i in indices], [rows[i].response for i in indices], columns,
                              lambda j: references[j], 0)
        return [v.score for v in future.result()], judge.costs()
    finally:
        judge.close()


def run(recipe: JudgeEvalRecipe, out: Path, rank: int, world: int) -> dict[str, float]:
    metrics = judged_metrics(recipe)
    rows = generations(recipe.run.inference_data_s3_path, "run.inference_data_s3_path", out / "data")
    base = generations(recipe.run.base_model_inference_data_s3_path, "run.base_model_inference_data_s3_path",
                       out / "data") if recipe.run.base_model_inference_data_s3_path else None
    check_generations(metrics, rows, base, "run.inference_data_s3_path")
    barrier = _barrier(world)
    done = []
    for metric in metrics:
        verdicts, costs = judge_rows(metric, rows, base, out, list(range(rank, len(rows), world)), rank, world)
        barrier()  # every process's verdicts are in the ledger
        if rank == 0:
            if world > 1:  # the others' rows too, all read back from the ledger
                verdicts, _ = judge_rows(metric, rows, base, out, list(range(len(rows))), rank, world)
            done.append(MetricVerdicts(metric.name, verdicts, costs.judge_calls, costs.judge_cached))
    return report(recipe, done, out) if rank == 0 else {}


def _barrier(world: int):
    if world == 1:
        return lambda: None
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=BARRIER_TIMEOUT)
    return dist.barrier


def report(recipe: JudgeEvalRecipe, done: list[MetricVerdicts], out: Path) -> dict[str, float]:
    """The table (each metric's mean verdict; WinRate's is the win rate), every row's verdicts, MLflow."""
    table = [scores.Score("llm_as_judge", m.metric, "judge", statistics.fmean(kept) if kept else float("nan"),
                          len(kept)) for m in done for kept in [[v for v in m.verdicts if v is not None]]]
    print(f"{recipe.run.inference_data_s3_path} judged by {recipe.run.judge_model_id}")
    head = f"{'metric':<26}  {'n':>4}  {'failed':>6}  {'score':>6}  {'asked':>5}  {'kept':>5}"
    print(head + "\n" + "-" * len(head))
    for score, m in zip(table, done):
        print(f"{m.metric:<26}  {score.n:>4}  {len(m.verdicts) - score.n:>6}  {score.value:>6.4f}  {m.calls:>5}  "
              f"{m.kept:>5}")
    print("asked: verdicts this process asked the judge; kept: found in the ledger, asked before")
    verdicts = out / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"row": i, "metric": m.metric, "score": v}) + "\n"
                                for m in done for i, v in enumerate(m.verdicts)))
    if recipe.output.mlflow_tracking_uri or recipe.output.mlflow_run_id:
        print(f"mlflow: run {scores.log_mlflow(recipe.output, table, None, 0, [verdicts])}")
    print(f"wrote {verdicts}")
    return {scores.metric_name(s): s.value for s in table}
