"""A GRPO step's experience: this rank's prompts completed by the rollout engine and scored.

`Experience` is what a step drew and what the updates train on: each prompt's group of completions
(token ids, an agent's loss mask and turns, the sampler's log-probabilities), each completion's
reward and every reward function's score, and the policy step that drew them. `ExperienceMaker`
makes it: it generates group by group and scores each group in the reward pool while the next one is
generated (an agent's trajectories with their environments' help), as TRL calls reward functions.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from training.contract.rewards import TrainerState
from training.batches import IGNORE_INDEX
from training.rl.reward_pool import RewardPool
from training.rl.rollout import Completion, PromptGroup, RolloutEngine, never
from training.rl.sampling import SamplingParams


@dataclass
class Experience:
    """This rank's completions of a step, scored (on the host)."""

    groups: list[PromptGroup]
    completions: list[list[Completion]]
    rewards: list[float]  # weighted totals, group after group (NaN: left out of its group's advantage)
    per_function: dict[str, list[float | None]]  # by reward spec; None: the function left that completion to the others
    # sampling, then waiting for the last scores; of the sampling, bringing the new weights to the sampler
    seconds: tuple[float, float, float] = (0.0, 0.0, 0.0)
    policy_step: int = 0  # the optimizer steps the policy that drew them had taken
    policy_lag: int = 0  # how many steps that policy is behind the one trained on them (max_steps_off_policy at most)
    logprob_s: float = 0.0  # the trainer's scoring of its completions (old and reference log-probabilities)
    # Rollout ranks (training.rl.rollout_ranks): the training rank's wait for this batch, and the rollout
    # process's wait for work (a request, or the policy it draws with) before drawing it
    batch_wait_s: float = 0.0
    rollout_idle_s: float = 0.0
    environment_s: float = 0.0  # an agent's: the rollout's wait for its environments
    # Made by a rollout process that asked the LLM judge: the judge's account of it (training.rl.judge.Costs
    # by name) and its newest failed verdict
    judge_costs: dict | None = None
    judge_failure: str | None = None

    def sums(self, group_size: int, reward_names: list[str]) -> dict:
        """This rank's sums of the experience by name (training.runtime.named_sums): completions,
        rewards (and each function's, with how many it scored), flat groups, tokens, cut completions
        and the rollout's seconds."""
        scored = [r for r in self.rewards if not math.isnan(r)]  # a dropped verdict scores nothing
        generate_s, reward_s, sync_s = self.seconds
        sums = {"completions": len(self.rewards), "reward": sum(scored), "reward_sq": sum(r * r for r in scored),
                "dropped": len(self.rewards) - len(scored), "groups": len(self.groups),
                "flat_groups": sum(len({r for r in self.rewards[g * group_size:(g + 1) * group_size] if not math.isnan(r)})
                                   <= 1 for g in range(len(self.groups))),
                "completion_tokens": sum(len(c.token_ids) for c in self.flat()),
                "cut": sum(not c.stopped for c in self.flat()),
                "rollout_s": generate_s, "reward_s": reward_s, "weight_sync_s": sync_s, "logprob_s": self.logprob_s,
                "policy_lag": self.policy_lag, "batch_wait_s": self.batch_wait_s, "rollout_idle_s": self.rollout_idle_s}
        for name, scores in zip(reward_names, self.per_function.values()):
            sums[f"reward:{name}"] = sum(x for x in scores if scored_value(x))
            sums[f"scored:{name}"] = sum(scored_value(x) for x in scores)
        return sums

    def flat(self) -> list[Completion]:
        return [c for group in self.completions for c in group]

    def audited(self, decode: Callable, group_size: int, reward_names: list[str]) -> dict:
        """Each completion's token ids (what a resized run must reproduce), and as a person reads it:
        its prompt and text, decoded, with its reward and each reward function's score."""
        readable = []
        for g, (group, completions) in enumerate(zip(self.groups, self.completions)):
            # an agent's: the data's prompt, without the tools the template lays out before it
            prompt = decode(group.prompt_ids, skip_special_tokens=True) if group.episode is None else \
                "\n".join(m.get("content") or "" for m in group.episode["prompt"]) \
                if isinstance(group.episode["prompt"], list) else group.episode["prompt"]
            for c in completions:
                k = g * group_size + c.index
                readable.append({"sample_id": c.sample_id, "index": c.index, "prompt": prompt,
                                 "completion": decode(c.token_ids, skip_special_tokens=True),
                                 "reward": or_none(self.rewards[k]),  # None: the judge's verdict was dropped
                                 "rewards": {name: or_none(scores[k])
                                             for name, scores in zip(reward_names, self.per_function.values())},
                                 **({"turns": c.trace.turns, "ended": c.trace.ended} if c.trace is not None else {})})
        return {"completions": [[c.sample_id, c.index, list(c.token_ids), *([list(c.loss_mask)] if c.loss_mask else [])]
                                for c in self.flat()],
                "readable": readable}


@dataclass
class Drawn:
    """A step's completions, generated, their scores on their way (training.rl.reward_pool.Scoring, a call per group)."""

    groups: list[PromptGroup]
    completions: list[list[Completion]]
    scoring: list
    step: int
    policy_step: int
    generate_s: float
    sync_s: float
    environment_s: float


def prompt_groups(prompts: list[dict], agent: bool = False) -> list[PromptGroup]:
    """The rollout's view of prompt rows (training.data's GRPO rows): an agent's episode starts from
    the prompt and the row's columns."""
    return [PromptGroup(p["sample_ids"][0], tuple(p["prompt_ids"]),
                        {"prompt": json.loads(p["prompt"]), "columns": json.loads(p["columns"])} if agent else None)
            for p in prompts]


def training_row(group: PromptGroup, completion: Completion) -> dict:
    """A completion as the updates train it: its prompt and tokens, labelled where the policy made
    them (an agent's tools' replies are context, as the prompt is)."""
    prompt = completion.prompt_ids or group.prompt_ids
    own = completion.loss_mask or [1] * len(completion.token_ids)
    ids = list(prompt) + list(completion.token_ids)
    labels = [IGNORE_INDEX] * len(prompt) + [t if mine else IGNORE_INDEX for t, mine in zip(completion.token_ids, own)]
    return {"input_ids": ids, "labels": labels, "sample_ids": [group.sample_id], "lengths": [len(ids)]}


def after_timeouts(totals: list[float], completions: list[Completion], policy: str) -> list[float]:
    """Rewards with the trajectories a tool's timeout ended as `on_tool_timeout` says: drop (NaN: out of
    its group's advantage, as a dropped verdict), zero, or score (as the reward functions scored it)."""
    if policy == "score":
        return totals
    return [(math.nan if policy == "drop" else 0.0) if c.trace is not None and c.trace.ended == "tool_timeout"
            else total for total, c in zip(totals, completions)]


class ExperienceMaker:
    """Completes prompts with `engine` and scores them with `rewards`; an agent's (`environments`)
    trajectories are scored as `on_tool_timeout` says and their environments released."""

    def __init__(self, engine: RolloutEngine, rewards: RewardPool, tokenizer, epoch_rows: float, environments,
                 on_tool_timeout: str):
        self.engine, self.rewards, self.tokenizer = engine, rewards, tokenizer
        self.epoch_rows = epoch_rows  # training rows per prompt of a step: steps x this = epochs (TRL's trainer_state)
        self.environments, self.on_tool_timeout = environments, on_tool_timeout

    def make(self, prompts: list[dict], n: int, params: SamplingParams, step: int, policy_step: int,
             stopped: Callable[[], bool] = never) -> Experience | None:
        """The step's completions, drawn by the policy after `policy_step` optimizer steps, each group
        scored in the reward pool while the next is generated; None when `stopped()` cut it short."""
        drawn = self.draw(prompts, n, params, step, policy_step, stopped)
        return self.scored(drawn, stopped) if drawn is not None else None

    def draw(self, prompts: list[dict], n: int, params: SamplingParams, step: int, policy_step: int,
             stopped: Callable[[], bool] = never) -> "Drawn | None":
        """The step's completions generated, their scoring started group by group; None when stopped."""
        started = time.perf_counter()
        groups, completions, scoring = prompt_groups(prompts, self.environments is not None), [], []
        for i, group in enumerate(self.engine.generate(groups, n, params, step, stopped)):
            completions.append(group)
            scoring.append(self.rewards.submit(*self.reward_call(prompts[i:i + 1], [group], step)))
        if len(completions) < len(groups):  # stopped: the calls in flight go with the pool's process
            self.rewards.close(kill=True)
            return None
        return Drawn(groups, completions, scoring, step, policy_step, time.perf_counter() - started,
                     self.engine.sync_s, getattr(self.engine, "environment_s", 0.0))

    def scored(self, drawn: "Drawn", stopped: Callable[[], bool] = never) -> Experience | None:
        """The experience of `drawn` once every score is in; None when stopped first."""
        waiting, scores = time.perf_counter(), []
        for call in drawn.scoring:
            if (scored := self.rewards.collect(call, stopped)) is None:
                break
            scores.append(scored)
        if len(scores) < len(drawn.groups):
            self.rewards.close(kill=True)
            return None
        per_function = {spec: [x for _, by_function in scores for x in by_function[spec]] for spec in self.rewards.specs}
        totals = self.trajectories_scored([x for totals, _ in scores for x in totals], drawn.completions)
        return Experience(drawn.groups, drawn.completions, totals, per_function,
                          (drawn.generate_s, time.perf_counter() - waiting, drawn.sync_s), drawn.policy_step,
                          drawn.step - drawn.policy_step, environment_s=drawn.environment_s)

    def score(self, prompts: list[dict], completions: list[list[Completion]], step: int) -> list[float]:
        """The completions' rewards, waited for (an evaluation's)."""
        totals, _ = self.rewards.score(*self.reward_call(prompts, completions, step))
        return self.trajectories_scored(totals, completions)

    def reward_call(self, prompts: list[dict], completions: list[list[Completion]], step: int) -> tuple:
        """The reward functions' arguments for these prompts' completions, as TRL calls them: each
        completion beside its prompt and its row's columns (text, or an assistant message for a chat
        prompt), the sample ids that name a failing row, and TRL's `completion_ids` and
        `trainer_state` (the step being taken and the epochs so far)."""
        rows = [(p, c) for p, group in zip(prompts, completions) for c in group]
        chats = {id(p): json.loads(p["prompt"]) for p in prompts}
        columns = {id(p): json.loads(p["columns"]) for p in prompts}
        texts = [self.tokenizer.decode(c.token_ids, skip_special_tokens=True) for _, c in rows]
        given = [t if isinstance(chats[id(p)], str) else messages(c, t) for (p, c), t in zip(rows, texts)]
        keys = sorted({k for c in columns.values() for k in c})
        extras = {"completion_ids": [list(c.token_ids) for _, c in rows],
                  "trainer_state": TrainerState(step, step * self.epoch_rows)}
        if self.environments is not None:
            extras["environment_keys"] = [c.trace.key for _, c in rows]
        return ([chats[id(p)] for p, _ in rows], given, {k: [columns[id(p)].get(k) for p, _ in rows] for k in keys},
                [c.sample_id for _, c in rows], extras)

    def trajectories_scored(self, totals: list[float], completions: list[list[Completion]]) -> list[float]:
        """An agent's scored trajectories: the rewards as on_tool_timeout says, their environments
        released. Other completions' rewards as they are."""
        if self.environments is None:
            return totals
        flat = [c for group in completions for c in group]
        self.environments.release([c.trace.key for c in flat])
        return after_timeouts(totals, flat, self.on_tool_timeout)


def messages(completion: Completion, text: str) -> list[dict]:
    """A completion as TRL gives a chat prompt's: the assistant's message, or an agent's turns and its
    tools' replies."""
    if completion.trace is None:
        return [{"role": "assistant", "content": text}]
    said = []
    for turn in completion.trace.turns:
        said.append({"role": "assistant", "content": turn["model"]})
        said += [{"role": "tool", "name": r["name"], "content": r["content"]} for r in turn.get("replies", [])]
    return said


def scored_value(value) -> bool:
    return value is not None and not math.isnan(value)


def or_none(value):
    return value if scored_value(value) else None
