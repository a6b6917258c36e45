"""GRPO's facts and keys (training_args.method_args, with verl's defaults) and what follows from them, torch-free:
the launcher checks them at every size and the dry run prints them without importing the method
(training/methods/grpo.py)."""

from __future__ import annotations

from dataclasses import dataclass

from training.contract.errors import ConfigError
from training.contract.methods import ARGS_KEY
from training.contract.typed import one_of, ranged

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
    # each completion's advantage (training.rl.algorithms): relative to its group's mean, or to the others' (RLOO)
    adv_estimator: str = one_of("grpo", "rloo")
    scale_rewards: bool = True  # grpo: divide by the group's standard deviation (verl's norm_adv_by_std_in_grpo)
    # verl's decoupled rollout importance sampling (algorithm.rollout_correction.rollout_is): each token's
    # loss weighed by pi_old / the sampler's probability, per token or per completion, at most the threshold;
    # auto: per token where the rollout runs behind (max_steps_off_policy > 0), else none
    rollout_correction: str = one_of("auto", "none", "token", "sequence")
    rollout_correction_threshold: float = ranged(2.0, gt=0)
    # The rollout runs behind (the vendor's async_config.max_steps_off_policy): step t's batch is drawn by the
    # policy after step max(0, t-1-s), a schedule by step number (training.rl.policy_versions); 0: on policy
    max_steps_off_policy: int = ranged(0, ge=0)
    # Ranks that only generate: k of each node's processes (on GPUs, its last k devices) make the experience
    # while the others train, max_steps_off_policy steps ahead (training.rl.rollout_ranks); 0: the training
    # ranks generate between their updates
    rollout_ranks_per_node: int = ranged(0, ge=0)
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


def completion_budget(options) -> int:
    """A completion's most tokens under GRPO's `method_args`: one answer (max_new_tokens), or an
    agent's every turn and tool reply (max_total_tokens; unset, max_turns answers)."""
    if not getattr(options, "environment", None):
        return options.max_new_tokens
    return options.max_total_tokens or options.max_new_tokens * options.max_turns


def correction_level(options) -> str:
    """GRPO's rollout correction as it runs: `auto` is per token where the rollout runs behind, else none."""
    if options.rollout_correction != "auto":
        return options.rollout_correction
    return "token" if options.max_steps_off_policy else "none"


def check_sampling_options(train_batch_size: int, options) -> None:
    """GRPO's keys that only make sense together: checked by the launcher at every size, by the trainer at its start."""
    if train_batch_size % options.mini_batches:
        raise ConfigError(f"{ARGS_KEY}.mini_batches={options.mini_batches} does not divide train_batch_size="
                          f"{train_batch_size} (prompts per step): each update takes an equal share of the step's prompts")
    if options.eval_pass_k and (max(options.eval_pass_k) > options.eval_group_size or min(options.eval_pass_k) < 1):
        raise ConfigError(f"{ARGS_KEY}.eval_pass_k={options.eval_pass_k} needs k from 1 to eval_group_size="
                          f"{options.eval_group_size}: raise eval_group_size to {max(options.eval_pass_k)} or drop the larger k")
