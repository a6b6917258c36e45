"""GRPO's evaluation (eval_steps): each validation prompt completed eval_group_size times (one: greedily),
the mean reward and, for each k of eval_pass_k, pass@k over the group (training.rl.algorithms.pass_at_k)."""

from __future__ import annotations

import dataclasses
import math

from training.rl.algorithms import pass_at_k
from training.rl.experience import prompt_groups
from training.rl.judge import judge_metrics


def evaluation_sums(engine, maker, judge, prompts: list[dict], params, options, step: int) -> dict:
    """This rank's sums of an evaluation of `prompts` (summed over ranks by the trainer), the judge's
    costs of it included where a judge scores."""
    params = dataclasses.replace(params, temperature=0) if options.eval_group_size == 1 else params
    # every rank gathers the model, even without prompts; step 0: the same draws at every evaluation
    completions = list(engine.generate(prompt_groups(prompts, bool(options.environment)), options.eval_group_size,
                                       params, 0))
    sums = {"reward": 0.0, "scored": 0.0, "prompts": 0.0, **{f"pass@{k}": 0.0 for k in options.eval_pass_k or []}}
    if prompts:
        totals = maker.score(prompts, completions, step)
        scored = [t for t in totals if not math.isnan(t)]
        n = options.eval_group_size
        passed = [sum(t >= options.eval_success_threshold for t in totals[g * n:(g + 1) * n]) for g in range(len(prompts))]
        sums = {"reward": sum(scored), "scored": len(scored), "prompts": len(prompts),
                **{f"pass@{k}": sum(pass_at_k(n, c, k) for c in passed) for k in options.eval_pass_k or []}}
    if judge is not None:  # the evaluation's own
        sums.update(dataclasses.asdict(judge.costs()))
    return sums


def evaluation_metrics(sums: dict, options, judge_ranks: int | None) -> dict:
    """The evaluation's record from its sums over ranks; `judge_ranks`: the ranks' count where a judge scored."""
    prompts, dropped = sums["prompts"], sums["prompts"] * options.eval_group_size - sums["scored"]
    judge = judge_metrics(sums, dropped, judge_ranks) if judge_ranks else {}
    return {"eval_reward": sums["reward"] / max(sums["scored"], 1),
            **{f"eval_pass@{k}": sums[f"pass@{k}"] / max(prompts, 1) for k in options.eval_pass_k or []},
            **{f"eval_{k}": v for k, v in judge.items() if k != "judge_ledger"}}  # the ledger's size: the steps' records
