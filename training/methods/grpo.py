"""Group relative policy optimization (Shao et al., 2024) with verifiable rewards.

A step takes the global batch of prompts (`train_batch_size` counts prompts), samples `num_generations`
completions of each and scores them: the step's Experience (training.rl.experience, the same completions at
any world size; an agent's trajectories with `environment`, their tool replies carrying no loss). Each reward
becomes an advantage relative to its group (`adv_estimator`); the experience is split into `mini_batches`
updates, the same prompts at every world size (training.rl.update_batches), each the policy loss `loss_fn`
against the rollout's log-probabilities plus `kl_coef` times the low-variance KL to the reference (the
initial model: LoRA's base, or a frozen copy as DPO's), averaged over the update's completion tokens on every
rank (verl's token-mean). The losses and estimators are registries in training.rl.algorithms.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
import uuid

import torch
import torch.distributed as dist

from training.batches import IGNORE_INDEX, BatchShape
from training.contract.environments import AGENT_ON_VLLM
from training.contract.errors import ConfigError
from training.contract.grpo_args import DATA_FORMAT, Args, completion_budget, correction_level
from training.contract.judge import NAME as JUDGE
from training.contract.judge import judge_settings
from training.contract.rewards import DEFAULT_REWARDS, RewardOptions, metric_names
from training.methods.base import MethodStep, TrainingMethod, model_inputs, reducing_on_the_last
from training.model.lora import adapter_layers, reference_of
from training.rl.algorithms import (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, correction_metrics, low_var_kl,
                                     rollout_correction_weights, token_sum)
from training.rl.engines import agent_engine, engine_files, rollout_engine, stop_token_ids
from training.rl.evaluation import evaluation_metrics, evaluation_sums
from training.rl.experience import Experience, ExperienceMaker
from training.rl.judge import Judge, judge_metrics
from training.rl.learning_signals import SignalWatch, service_watches
from training.rl.policy_versions import PolicyVersions
from training.rl.reward_pool import RewardPool
from training.rl.rollout_ranks import RolloutJudge, RolloutRanks, RolloutSetup, Spawned
from training.rl.sampling import SamplingParams
from training.rl.update_batches import largest_micro_batch, micro_batch, update_chunks
from training.runtime.named_sums import added
from training.runtime.topology import Topology


class GRPO(TrainingMethod):
    options: Args  # its keys, torch-free for the launcher (training.contract.grpo_args)
    data_format = DATA_FORMAT
    reference: torch.nn.Module | None = None

    def __init__(self, args, options, device, shape=None):
        super().__init__(args, options, device, shape)
        self.rows_per_sample = options.num_generations
        self.prompt_limit = options.max_prompt_length
        self.correction = correction_level(options)
        self.params = SamplingParams(options.temperature, options.top_p, options.top_k, options.max_new_tokens,
                                     log_probs=self.correction != "none")
        self.versions: PolicyVersions | None = None
        self.rollout_processes = None
        # A training process's (not the memory trace's): started now, their imports overlap the trainer's start
        if options.rollout_ranks_per_node and "WORLD_SIZE" in os.environ:
            topology = Topology.from_env()
            per_node = topology.world_size // topology.nodes
            if topology.rank % per_node == 0:
                self.rollout_processes = Spawned.start(options.rollout_ranks_per_node, per_node, device.type == "cuda")
        if options.environment:
            from training.contract.environments import load_environment, tools

            self.prompt_tools = [t.schema for t in tools(load_environment(options.environment))]
            if options.rollout_engine == "vllm":
                raise ConfigError(AGENT_ON_VLLM)
        specs = options.rewards or DEFAULT_REWARDS
        self.judge_settings = judge_settings(options.judge) if JUDGE in specs else None
        self.rewards = RewardPool(specs, options.reward_weights, RewardOptions(options.answer_key, options.format_pattern),
                                  options.reward_timeout)
        self.reward_names = metric_names(specs)
        self.signals = SignalWatch()
        self.service_watches = service_watches(self.judge_settings, self._judge_failure, options)

    def _judge_failure(self, step: MethodStep) -> str | None:
        """The newest failed verdict of the judge that scored the step (a rollout process's, or this rank's)."""
        return step.state.judge_failure if step.state.judge_costs is not None else self.rewards.judge.last_failure

    # --- set-up ---
    def checkpoint_state(self, model) -> dict:
        if not self.options.max_steps_off_policy:
            return {}
        if self.versions is None or self.versions.model is not model:  # a fresh start's: the initial weights
            self.versions = PolicyVersions(model, self.options.max_steps_off_policy)
        return {"policy_versions": self.versions.state_dict()}

    def prepare(self, model, frozen_copy, run=None):
        self.checkpoint_state(model)
        if self.options.kl_coef > 0 and not adapter_layers(model):
            self.reference = frozen_copy()
        if run is None:  # the memory trace: the updates only
            return
        self.run = run  # tokenizer, plan, rank (training.methods.base.RunInfo)
        self.params = dataclasses.replace(self.params,
                                          stop_token_ids=stop_token_ids(run.tokenizer, model.config, run.model_path))
        self.engine, environments = rollout_engine(model, run, self.options, self.device, self.args.seed), None
        if self.options.environment:
            self.engine, environments = agent_engine(self.engine, run.tokenizer, run.template_kwargs, self.options,
                                                     self.prompt_tools, self.rewards)
        epoch_rows = self.args.train_batch_size / max(run.train_rows, 1)
        self.maker = ExperienceMaker(self.engine, self.rewards, run.tokenizer, epoch_rows,
                                     environments, self.options.on_tool_timeout)
        judge_size = None  # the ledger files' name of this size, shared by its processes
        if self.judge_settings is not None:
            shared = [uuid.uuid4().hex[:8]]
            dist.broadcast_object_list(shared, src=0)
            judge_size = shared[0]
            # the training ranks' judge: every verdict where they draw, an evaluation's beside rollout ranks
            self.rewards.judge = Judge(self.judge_settings, run.rank, run.plan.dp_size, run.run_dir, judge_size,
                                       f"rank{run.rank}", audit=run.audit, checkpoint_uri=run.checkpoint_uri)
        if self.options.rollout_ranks_per_node:
            self.rollout_ranks = self._rollout_ranks(model, run, epoch_rows, judge_size)

    def _rollout_ranks(self, model, run, epoch_rows: float, judge_size: str | None) -> RolloutRanks:
        """The node's rollout processes, sent the policies of the steps s ahead: the kept older ones
        (a resume's, from its checkpoint), then the model's. `judge_size`: the ledger files' name of this
        size, where a judge scores."""
        per_node = dist.get_world_size() // run.nodes
        judge = None if judge_size is None else RolloutJudge(
            self.judge_settings, judge_size, run.rank // per_node, run.nodes, run.audit, run.checkpoint_uri)
        files = engine_files(model, run) if self.options.rollout_engine == "vllm" else None
        setup = RolloutSetup(run.model_config, run.model_source, self.options, self.args.seed, run.tokenizer,
                             run.template_kwargs, getattr(self, "prompt_tools", None), epoch_rows, run.run_dir, files,
                             judge)
        ranks = RolloutRanks(self.rollout_processes, setup, self.options.max_steps_off_policy,
                             per_node, run.rank, run.step, run.max_steps - 1, run.prompts_at, self.params)
        first, step = True, run.step
        for age in range(self.options.max_steps_off_policy):
            with self.versions.in_the_model(age):
                ranks.send_policy(model, max(0, step - self.options.max_steps_off_policy + age), everything=first)
            first = False
        ranks.send_policy(model, step, everything=first)
        return ranks

    @property
    def completion_budget(self) -> int:
        return completion_budget(self.options)

    def checkpointed(self, step: int) -> None:
        if self.rewards.judge is not None:
            self.rewards.judge.checkpointed(step, first=self.run.rank == 0)
            if self.options.rollout_ranks_per_node:
                self.rollout_ranks.checkpointed(step)

    @property
    def row_shape(self) -> BatchShape:
        """Rows of prompt + completion, padded to a power-of-two width (training.batches.BatchShape)."""
        o = self.options
        return BatchShape(o.micro_completions or self.shape.rows, o.max_prompt_length + self.completion_budget, False)

    def close(self) -> None:
        if self.rollout_processes is not None:
            self.rollout_processes.close()
        self.rewards.close()
        if getattr(self, "engine", None) is not None:  # none where only the memory trace prepared the method
            self.engine.close()

    # --- data ---
    def collate(self, rows):
        return {"prompts": rows, "sample_ids": [r["sample_ids"][0] for r in rows], "label_tokens": 0,
                "tokens": sum(len(r["prompt_ids"]) for r in rows), "squared_lengths": 0, "documents": len(rows)}

    # --- a step ---
    def updates(self, model, micro_batches, step):
        prompts = [p for micro in micro_batches for p in micro["prompts"]]
        experience = self._rollout(model, prompts, step)
        # Before any forward of the updates (FSDP's collectives): whether a rank's stop cut its rollout.
        if self.run.agree_stop():
            return None
        scoring = time.perf_counter()
        advantages = ADVANTAGE_ESTIMATORS[self.options.adv_estimator](
            torch.tensor(experience.rewards, dtype=torch.float64), self.options.num_generations, self.options)
        # The first update's policy is the rollout's: its own forward gives the old log-probabilities.
        updates = [[self._micro_batch(model, experience, advantages, chunk, old_log_probs=u > 0) for chunk in chunks]
                   for u, chunks in enumerate(update_chunks(self.run.plan, self.run.rank, self.options.mini_batches,
                                                            self.options.num_generations, self.row_shape.rows))]
        if self.run.agree_stop():  # a stop during the log-probabilities' forwards: the weights are still the last step's
            return None
        experience.logprob_s = time.perf_counter() - scoring  # the agreement waited for them
        if self.versions is not None:  # the step is taken: its policy is kept for the rollouts behind it
            self.versions.advance()
        return MethodStep(updates, experience)

    def _rollout(self, model, prompts: list[dict], step: int) -> Experience | None:
        """The step's experience (training.rl.experience); None when this rank's stop cut it short."""
        if self.options.rollout_ranks_per_node:  # made by the rollout processes: the model's policy goes to them
            sync_s = self.rollout_ranks.send_policy(model, step)
            waiting = time.perf_counter()
            experience = self.rollout_ranks.experience(step, self.run.stop_requested)
            if experience is not None:
                experience.seconds = (*experience.seconds[:2], sync_s)
                experience.batch_wait_s = time.perf_counter() - waiting
            return experience
        model.eval()
        try:
            with self.versions.in_the_model() if self.versions is not None else contextlib.nullcontext():
                return self.maker.make(prompts, self.options.num_generations, self.params, step,
                                       max(0, step - self.options.max_steps_off_policy), self.run.stop_requested)
        finally:
            model.train()

    def _micro_batch(self, model, experience: Experience, advantages: torch.Tensor, completions: list[tuple[int, int]],
                     old_log_probs: bool) -> dict:
        batch = micro_batch(experience, advantages, completions, self.row_shape, self.options.num_generations,
                            sampler_log_probs=self.correction != "none")
        with torch.no_grad():  # the rollout policy's and the reference's log-probabilities, before any update
            inputs = model_inputs(batch, self.device)
            if old_log_probs:
                batch["old_log_probs"] = model(**inputs, per_token=True)[0]
            if self.options.kl_coef > 0:
                with reference_of(model, self.reference) as reference:
                    batch["ref_log_probs"] = reference(**inputs, per_token=True)[0]
        return batch

    def traced_micro_batch(self, vocab: int) -> dict:
        """An update's micro-batch at its largest, for the memory trace (an agent's completion: max_total_tokens)."""
        o = self.options
        carried = (("old_log_probs", o.mini_batches > 1), ("ref_log_probs", o.kl_coef > 0),
                   ("rollout_log_probs", self.correction != "none"))
        return largest_micro_batch(self.row_shape, o.max_prompt_length, self.completion_budget, vocab,
                                   tuple(key for key, kept in carried if kept))

    def forward_backward(self, model, micro_batches, label_tokens, global_batch, documents=None):
        # The update's loss summed over its completion tokens, over the update's tokens on every rank
        # (FSDP sums the ranks' gradients): token-mean at any size.
        scale = 1 / label_tokens.clamp(min=1)
        o = self.options
        loss_sum, sums = torch.zeros((), device=self.device), {}
        for micro in reducing_on_the_last(model, micro_batches):
            inputs = model_inputs(micro, self.device)
            mask = (inputs["labels"] != IGNORE_INDEX).float()
            log_probs, entropy = model(**inputs, per_token=True)
            old = micro["old_log_probs"] if "old_log_probs" in micro else log_probs.detach()
            advantages = micro["advantages"].to(self.device, log_probs.dtype)
            policy, clipped = POLICY_LOSSES[o.loss_fn](log_probs, old, advantages, o)
            correction = torch.ones_like(policy)
            if "rollout_log_probs" in micro:
                correction = rollout_correction_weights(old, micro["rollout_log_probs"].to(old), mask,
                                                        self.correction, o.rollout_correction_threshold)
                policy = policy * correction
            loss = policy
            kl = torch.zeros_like(policy)
            if o.kl_coef > 0:
                kl = low_var_kl(log_probs, micro["ref_log_probs"])
                loss = policy + o.kl_coef * kl
            total = token_sum(loss, mask)
            (total * scale.to(total.dtype)).backward()
            loss_sum += total.detach()
            sums = added(sums, {name: token_sum(t.detach(), mask).double() for name, t in (
                ("policy_loss", policy), ("kl", kl), ("clipped", clipped), ("entropy", entropy), ("correction", correction),
                ("correction_sq", correction * correction),
                ("truncated", (correction >= o.rollout_correction_threshold).float()))})
        return loss_sum, sums

    def watch(self, record: dict, step: MethodStep) -> list[str]:
        said = [warning for watch, a_failure in self.service_watches for warning in watch(record, a_failure(step))]
        return said + self.signals(record)

    def failing(self) -> str | None:
        return next((dead for watch, _ in self.service_watches if (dead := watch.dead())), None)

    def warnings(self) -> list[str]:
        return list(self.signals.said.values())

    def audited(self, step: MethodStep):
        return step.state.audited(self.run.tokenizer.decode, self.options.num_generations, self.reward_names)

    # --- metrics ---
    def step_stats(self, step: MethodStep) -> dict:
        """This rank's sums of the step's experience by name (summed over ranks by the trainer): its
        completions and rewards, each reward function's, the judge's and an agent's."""
        experience: Experience = step.state
        # The longest completion over every rank, as each rank's copy of it: summed, dp_size times it.
        longest = torch.tensor([float(max((len(c.token_ids) for c in experience.flat()), default=0))], device=self.device)
        dist.all_reduce(longest, op=dist.ReduceOp.MAX)
        sums = {**experience.sums(self.options.num_generations, self.reward_names), "longest_copies": float(longest)}
        if self.rewards.judge is not None:  # a rollout process's judge's account, else this rank's
            sums.update(experience.judge_costs or dataclasses.asdict(self.rewards.judge.costs()))
        if self.options.environment:
            sums.update(self.engine.step_sums([c.trace for c in experience.flat()], experience.environment_s))
        return sums

    def step_metrics(self, loss_sum, sums, label_tokens, global_batch):
        count, tokens, ranks = max(sums["completions"], 1), max(label_tokens, 1), self.run.plan.dp_size
        kept = max(count - sums["dropped"], 1)
        mean = sums["reward"] / kept
        rollout_s = sums["rollout_s"] / ranks  # the seconds: the ranks' mean
        return {"loss": loss_sum / tokens, "reward": mean,
                "reward_std": math.sqrt(max(sums["reward_sq"] / kept - mean * mean, 0.0)),
                **{f"reward_{name}": sums[f"reward:{name}"] / max(sums[f"scored:{name}"], 1) for name in self.reward_names},
                "flat_groups": sums["flat_groups"] / max(sums["groups"], 1),
                "completion_tokens_mean": sums["completion_tokens"] / count,
                "completion_tokens_max": sums["longest_copies"] / ranks, "cut_fraction": sums["cut"] / count,
                "kl": sums["kl"] / tokens, "clip_fraction": sums["clipped"] / tokens,
                "entropy": sums["entropy"] / tokens, "rollout_s": rollout_s, "weight_sync_s": sums["weight_sync_s"] / ranks,
                "policy_lag": sums["policy_lag"] / ranks,  # each rank's copy of the batch's lag
                **({"batch_wait_s": sums["batch_wait_s"] / ranks, "rollout_idle_s": sums["rollout_idle_s"] / ranks}
                   if self.options.rollout_ranks_per_node else {}),
                **(correction_metrics(sums, tokens) if self.correction != "none" else {}),
                "reward_s": sums["reward_s"] / ranks, "logprob_s": sums["logprob_s"] / ranks,
                "rollout_tokens_per_s": sums["completion_tokens"] / max(rollout_s, 1e-9),
                **(judge_metrics(sums, sums["dropped"], ranks) if self.rewards.judge is not None else {}),
                **(self.engine.step_metrics(sums, count, ranks) if self.options.environment else {})}

    # --- evaluation: eval_group_size completions per validation prompt (one: greedy), the mean reward, pass@k ---
    def eval_sums(self, model, batch, step):
        return evaluation_sums(self.engine, self.maker, self.rewards.judge, batch["prompts"], self.params,
                               self.options, step)

    def eval_metrics(self, sums):
        return evaluation_metrics(sums, self.options, self.run.plan.dp_size if self.rewards.judge is not None else None)


METHOD = GRPO
