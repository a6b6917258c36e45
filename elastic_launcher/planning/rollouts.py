"""GRPO's side of a plan: will its rollouts and updates fit, can its vLLM engines run where the job
runs, is a completion the same at any world size, and what its LLM judge will be asked (the dry
run's lines). The plan (elastic_launcher.planning.plan) calls them for a GRPO recipe; every other
method passes through them untouched."""

from __future__ import annotations

import dataclasses

from elastic_launcher.planning.instances import InstanceType
from elastic_launcher.planning.memory import (CUDA_CONTEXT_GIB, FIT_SHARE, GIB, VLLM_ASLEEP_GIB, MemoryEstimate,
                                              ModelShape)
from elastic_launcher.words import plural
from training.contract.errors import ConfigError
from training.contract.judge import NAME, describe, judge_settings
from training.contract.grpo_args import completion_budget, correction_level
from training.contract.methods import sampling_options
from training.contract.vllm_builds import batch_invariance_refusal


def check_phases(memory: MemoryEstimate, instance: InstanceType, nodes: int, tc, model_shape: dict | None) -> None:
    """GRPO: a size where its rollout or its updates would not fit is refused, naming what to change
    (an out-of-memory rollout loses the step's work every time it is retried), and so is a vLLM
    share of the GPU that cannot hold the model's weights (vLLM would refuse to start)."""
    limit, key = FIT_SHARE * instance.gpu_memory_gib, "training_config.training_args.method_args"
    options = sampling_options(tc)
    vllm = options.rollout_engine == "vllm"
    if vllm and model_shape:
        weights = 2 * ModelShape.from_config(model_shape).params / options.rollout_tensor_parallel_size / GIB
        share = options.rollout_gpu_memory_utilization * instance.gpu_memory_gib
        if weights >= share:
            raise ConfigError(f"{key}.rollout_gpu_memory_utilization={options.rollout_gpu_memory_utilization:g} gives "
                              f"vLLM {share:.0f} GiB of each GPU, not enough for the model's bf16 weights over "
                              f"rollout_tensor_parallel_size={options.rollout_tensor_parallel_size} GPUs ({weights:.0f} "
                              f"GiB) and a KV cache: raise either")

    def over(phase: str, gib: float) -> str:
        return (f"at {plural(nodes, 'node')} GRPO's {phase} need ~{gib:.0f} GiB per GPU, over {FIT_SHARE:.0%} of the "
                f"{instance.gpu_memory_gib:g} GiB of {instance.name}")

    if memory.rollout_gib > limit:
        fix = f"lower {key}.rollout_gpu_memory_utilization" if vllm else \
            f"set {key}.rollout_engine=vllm, or lower num_generations or max_new_tokens"
        raise ConfigError(f"{over('rollouts', memory.rollout_gib)}: {fix}, or raise min_nodes")
    if memory.total_gib > limit:
        raise ConfigError(f"{over('updates', memory.total_gib)}: lower micro_train_batch_size or {key}.max_new_tokens"
                          + (f", lower {key}.rollout_gpu_memory_utilization" if vllm else "") + ", or raise min_nodes")


def check_rollout_engine(tc, nproc: int, model_shape: dict | None) -> None:
    """GRPO's vLLM rollouts: engines that fit within a node, and batch invariance only where vLLM has
    kernels for it (GPUs on a cluster: render.manifests checks them, as a local run takes vLLM's
    CPU build)."""
    options = sampling_options(tc)
    if options is None or options.rollout_engine != "vllm":
        return
    key = "training_config.training_args.method_args"
    if options.rollout_ranks_per_node and options.rollout_tensor_parallel_size > 1:
        raise ConfigError(f"{key}.rollout_tensor_parallel_size={options.rollout_tensor_parallel_size} with "
                          f"rollout_ranks_per_node: each rollout process's engine runs on its own GPU; set it to 1, "
                          f"or rollout_ranks_per_node=0 (engines on the training ranks)")
    if nproc % options.rollout_tensor_parallel_size:
        raise ConfigError(f"{key}.rollout_tensor_parallel_size={options.rollout_tensor_parallel_size} does not divide "
                          f"the {plural(nproc, 'process')} of a node: an engine's GPUs are within one node")
    refusal = batch_invariance_refusal(ModelShape.from_config(model_shape).mixers) if model_shape else None
    if options.rollout_batch_invariant and refusal:
        raise ConfigError(refusal)


def rollout_ranks(tc) -> int:
    """GRPO's rollout_ranks_per_node: of each node's processes, those that only generate; 0 otherwise."""
    options = sampling_options(tc)
    return options.rollout_ranks_per_node if options is not None else 0


def training_processes(tc, nproc: int) -> int:
    """Of a node's `nproc` processes, those that train: all but GRPO's rollout_ranks_per_node (k), which
    only generate (training.rl.rollout_ranks). A split that leaves no training rank is refused."""
    k = rollout_ranks(tc)
    if k >= nproc:
        raise ConfigError(f"training_config.training_args.method_args.rollout_ranks_per_node={k} leaves none of a "
                          f"node's {plural(nproc, 'process')} to train: set it below {nproc}, or raise trainer.nproc_per_node")
    return nproc - k


def check_cluster_rollouts(tc, instance: InstanceType) -> None:
    """A cluster job's vLLM rollouts need GPUs: the image's vLLM is its CUDA build (a local run takes
    vLLM's CPU build)."""
    options = sampling_options(tc)
    if options is not None and options.rollout_engine == "vllm" and not instance.gpus:
        raise ConfigError(f"training_config.training_args.method_args.rollout_engine=vllm needs GPUs, and "
                          f"{instance.name} has none (the image's vLLM is its CUDA build; action=local runs vLLM's "
                          f"CPU build): set rollout_engine=trainer or a GPU instance type")


def rollout_reproducibility(tc, instance: InstanceType) -> str | None:
    """GRPO: whether a completion is the same at any world size (and so across a resize), by who
    samples; None for other methods."""
    options = sampling_options(tc)
    if options is None:
        return None
    if options.environment:
        return (f"an agent's trajectories on the trainer's own sampler: the same at any world size, bitwise, where its "
                f"environment ({options.environment}) answers the same calls alike; one that reaches a service or "
                f"keeps state beyond its trajectory makes them valid draws but not a fixed-size run's")
    if options.rollout_engine == "trainer":
        return "the trainer's own sampler: a completion is the same at any world size, bitwise"
    if not instance.gpus:
        return ("vLLM's CPU build (action=local): a completion is the same at any world size, bitwise (its fp32 "
                "kernels do not depend on the batch)")
    if options.rollout_batch_invariant:
        return "vLLM, batch invariant: a completion is the same at any world size, bitwise (slower sampling)"
    return ("vLLM without batch invariance: a completion depends on the requests batched with it, so after a resize "
            "the completions are valid draws but not a fixed-size run's (method_args.rollout_batch_invariant=true "
            "makes them the same)")


def rollout_lag(tc) -> str | None:
    """GRPO with its rollout behind the policy: what each step trains on and what that keeps; None on policy."""
    options = sampling_options(tc)
    if options is None or not (options.max_steps_off_policy or options.rollout_ranks_per_node):
        return None
    s, k = options.max_steps_off_policy, options.rollout_ranks_per_node
    where = f"by {plural(k, 'rollout process')} per node beside the training ranks, {s} steps ahead of the updates" if k \
        else "on the training ranks"
    return (f"step t trains on a batch drawn by the policy after step max(0, t-1-{s}) (max_steps_off_policy={s}), "
            f"{where}; each rank keeps {s} older copies of its shard of the trainable weights, in memory "
            f"and in every checkpoint, and the loss weighs each token by the correction "
            f"({correction_level(options)}, up to {options.rollout_correction_threshold:g})")


def judge_lines(tc, askers: int) -> list[str]:
    """GRPO with an LLM judge among its rewards: the dry run's lines on it (training.contract.judge),
    with `askers` processes asking it at the job's largest size (its training ranks, or with
    rollout_ranks_per_node its rollout ranks)."""
    options = sampling_options(tc)
    if options is None or NAME not in (options.rewards or ()):
        return []
    settings = judge_settings(options.judge)
    call_tokens = options.max_prompt_length + completion_budget(options) + 300 + \
        settings.sampling_params.max_completion_tokens  # 300: a template's own words
    return describe(settings, tc.training_args.train_batch_size, options.num_generations, askers, call_tokens)


def rollout_phases(step: MemoryEstimate, model_shape: dict, tc, instance: InstanceType) -> MemoryEstimate:
    """GRPO's two phases on one GPU, beside the sharded state: the rollout (the trainer's own
    sampler: the gathered model and one group's KV cache; vLLM: the engine awake, its share of the
    GPU) and the updates (the training step; a vLLM engine asleep beside it); with rollout ranks, the
    rollout on a GPU of its own (the unsharded copy its policies are loaded into, and the sampler's
    cache or the engine awake) while the training ranks only update. Other methods: the step."""
    o = sampling_options(tc)
    if o is None:
        return step
    shape, width = ModelShape.from_config(model_shape), 2 if tc.model_config.mixed_precision == "bf16" else 4
    if o.rollout_engine == "vllm":
        awake = o.rollout_gpu_memory_utilization * instance.gpu_memory_gib
        if o.rollout_ranks_per_node:
            return dataclasses.replace(step, rollout_gib=width * shape.params / GIB + awake + CUDA_CONTEXT_GIB)
        return dataclasses.replace(step, total_gib=step.total_gib + VLLM_ASLEEP_GIB,
                                   rollout_gib=step.state_gib + awake + CUDA_CONTEXT_GIB)
    # the KV cache of a group's batch; an agent's later turns are generated row by row
    tokens = max(o.num_generations * (o.max_prompt_length + o.max_new_tokens), o.max_prompt_length + completion_budget(o))
    sampling = (width * shape.params + tokens * shape.kv_bytes_per_token(width)) / GIB
    # rollout_ranks_per_node: a GPU of its own holds the rollout (the unsharded model and the KV cache;
    # the policies it is sent wait on the host), and the training ranks only update
    beside = 0.0 if o.rollout_ranks_per_node else step.state_gib
    return dataclasses.replace(step, rollout_gib=beside + sampling + CUDA_CONTEXT_GIB)
