"""GRPO's rollouts on vLLM (`method_args.rollout_engine: vllm`): one engine per training process
(vLLM's `external_launcher`: the engine lives in the trainer's process and joins its torch.distributed
world; `rollout_tensor_parallel_size` consecutive ranks of a node form one engine). On GPUs the engine
sleeps while the policy trains; on CPU (vLLM's CPU build, training.contract.vllm_builds) it stays awake.
A rollout process (`method_args.rollout_ranks_per_node`, training.rl.rollout_ranks) holds a standalone
engine instead: a world of its own (vLLM's one-process executor), always awake, synced only when it is
given another policy.

The engine starts from the model's config with dummy weights (its files are never read twice). Each
rollout streams the policy's weights into it through vLLM's own reload (`reload_weights`, which reruns
each layer's post-load processing) from the FSDP shards, one gathered tensor at a time (never a full
model copy beside the sharded one; LoRA's adapters folded into their base weights: vLLM lacks LoRA for
several of the catalogue's architectures); a parameter the stream leaves out is an error. Every
completion is its own request with its own seed (training.rl.sampling's), so where vLLM is batch
invariant (its CPU build here; `VLLM_BATCH_INVARIANT=1` on GPUs) a completion does not depend on which
requests shared its batch, nor on the world size. The importance ratio's log-probabilities come from
the trainer's own forward (training.methods.grpo); vLLM's serve the rollout correction
(method_args.rollout_correction), which weighs the difference.

vLLM is imported only when this engine is built: the launcher and CPU installs without it never need it.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from training.model.lora import merged_elements
from training.model.stored_layout import file_tensors
from training.rl.rollout import Completion, PromptGroup, never
from training.rl.sampling import SamplingParams, completion_seed
from training.contract.vllm_builds import engine_arguments
from training.runtime.elastic import signal_mask_kept


@dataclass(frozen=True)
class VLLMOptions:
    tensor_parallel_size: int = 1  # ranks per engine, within a node
    gpu_memory_utilization: float = 0.6  # of each GPU, for the engine's weights and KV cache while awake
    max_num_seqs: int = 1024  # requests an engine runs at once


# Environment variables vLLM overwrites in-process that belong to the trainer: its compile caches on the
# run's volume (a restart after a resize reuses them) and inductor's compile threads.
TRAINER_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS")


def sampling_requests(groups: list[PromptGroup], n: int, params: SamplingParams, step: int,
                      seed: int) -> list[tuple[list[int], dict]]:
    """One request per completion: (prompt token ids, vLLM SamplingParams keywords), group after
    group, each seeded by its own coordinates."""
    requests = []
    for group in groups:
        for index in range(n):
            requests.append((list(group.prompt_ids), {
                "n": 1, "temperature": params.temperature, "top_p": params.top_p,
                "top_k": params.top_k if params.top_k > 0 else -1, "max_tokens": params.max_new_tokens,
                "stop_token_ids": list(params.stop_token_ids), "seed": completion_seed(seed, group.sample_id, index, step),
                "detokenize": False, **({"logprobs": 0} if params.log_probs else {})}))
    return requests


def completions_from(outputs: list, groups: list[PromptGroup], n: int, stop_token_ids: tuple[int, ...]) -> list[list[Completion]]:
    """vLLM's outputs (one per request of `sampling_requests`, in order) as the trainer's completions:
    token ids up to and including the stop token, as the trainer's own sampler returns them, and
    where they were asked for (`logprobs`), each sampled token's log-probability."""
    completions = []
    for g, group in enumerate(groups):
        own = []
        for index in range(n):
            out = outputs[g * n + index].outputs[0]
            tokens, stopped = list(out.token_ids), out.finish_reason == "stop"
            # vLLM's raw log-probabilities: one {token id: Logprob} per generated token, the sampled one among them
            log_probs = [step[token].logprob for step, token in zip(out.logprobs, tokens)] if out.logprobs else []
            if stopped and isinstance(out.stop_reason, int) and (not tokens or tokens[-1] != out.stop_reason):
                tokens.append(out.stop_reason)  # a stop token left out of the output: the trainer scores it too
                if log_probs:
                    log_probs.append(float("nan"))  # vLLM gave none for it
            own.append(Completion(group.sample_id, index, tuple(tokens), stopped and (not stop_token_ids or
                                                                                   tokens[-1] in stop_token_ids),
                                  tuple(log_probs)))
        completions.append(own)
    return completions


class VLLMRollout:
    """A `training.rl.rollout.RolloutEngine` on vLLM. Built on every rank at once (the engines form
    their tensor-parallel groups through the trainer's process group); `close()` before that group
    is rebuilt (an in-place resize) or destroyed."""

    def __init__(self, model, engine_model: str, tokenizer: str, options: VLLMOptions, seed: int, max_model_len: int,
                 lora: bool, device: torch.device, dtype: torch.dtype, standalone: bool = False):
        """`standalone`: a rollout process's engine, in a world of its own, awake, its weights streamed
        only after `policy_changed()`; else a training process's, whose weights change with every update."""
        self.model, self.options, self.seed, self.lora, self.device = model, options, seed, lora, device
        self.standalone = standalone
        self.elements = merged_elements(model)  # what every weight stream must carry
        if standalone:  # vLLM's one-process executor forms its world of one on loopback
            os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
            tp, engine_seed, self.tp_group = 1, 0, None
        else:
            tp, rank, world = options.tensor_parallel_size, dist.get_rank(), dist.get_world_size()
            self.tp_group = dist.new_subgroups_by_enumeration([list(range(r, r + tp)) for r in range(0, world, tp)])[0] \
                if tp > 1 else None
            engine_seed = rank // tp
        allocator_settings_for_vllm()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process, as either executor needs
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # not a few INFO lines per step in the trainer's log
        with trainer_state_kept(), signal_mask_kept():
            from vllm import LLM

            logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(not_rotary)
            platform = engine_arguments(device.type, options.gpu_memory_utilization)
            platform["enable_sleep_mode"] &= not standalone  # a rollout process's engine has its device to itself
            self.sleeps = platform["enable_sleep_mode"]  # asleep between rollouts, where the platform can sleep
            self.llm = LLM(model=engine_model, tokenizer=tokenizer, load_format="dummy", tensor_parallel_size=tp,
                           distributed_executor_backend="uni" if standalone else "external_launcher",
                           max_num_seqs=options.max_num_seqs, max_model_len=max_model_len, seed=engine_seed,
                           dtype=dtype, **platform)
        if self.sleeps:
            self.llm.sleep(level=2)  # weights dropped: each rollout streams them in anew
        self.stale = True  # the engine's weights are not the policy's (dummy ones at first)
        self.sync_s = 0.0

    def policy_changed(self) -> None:
        """The model holds another policy now: the next rollout streams it in."""
        self.stale = True

    def generate(self, groups, n, params, step, interrupted: Callable[[], bool] = never):
        mine = len(groups)
        if self.tp_group is not None:  # an engine's ranks all send it the same requests: the group's prompts
            gathered = [None] * self.options.tensor_parallel_size
            dist.all_gather_object(gathered, groups, group=self.tp_group)
            start = sum(len(g) for g in gathered[:dist.get_rank() % self.options.tensor_parallel_size])
            groups = [g for part in gathered for g in part]
        else:
            start = 0
        with signal_mask_kept():  # vLLM may start a helper process on its first use
            done = self._rollout(groups, n, params, step, interrupted)
        yield from done[start:start + mine]

    def _rollout(self, groups, n, params, step, interrupted) -> list[list[Completion]]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        started = time.perf_counter()
        if self.stale:
            self._wake_with_new_weights()
            self.stale = not self.standalone  # a training process's updates change the weights after every rollout
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.sync_s = time.perf_counter() - started
        try:
            per_call = max(1, self.options.max_num_seqs // n)  # a stop is heard between calls
            done: list[list[Completion]] = []
            for first in range(0, len(groups), per_call):
                if self._agreed(interrupted()):
                    break
                chunk = groups[first:first + per_call]
                requests = sampling_requests(chunk, n, params, step, self.seed)
                outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids, _ in requests],
                                            [VLLMSamplingParams(**kw) for _, kw in requests], use_tqdm=False)
                done += completions_from(outputs, chunk, n, params.stop_token_ids)
        finally:
            if self.sleeps:
                self.llm.sleep(level=2)
        return done

    def _agreed(self, stop: bool) -> bool:
        """Whether any rank of this engine stops: its ranks must make the same calls."""
        if self.tp_group is None:
            return stop
        flag = torch.tensor([float(stop)], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.tp_group)
        return bool(flag.item())

    def _wake_with_new_weights(self) -> None:
        """Weights first (their memory back, after the updates' cached blocks went back to the
        driver: vLLM maps its own), then the new values streamed in, then the KV cache."""
        if self.sleeps:
            gc.collect()
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=["weights"])
        missing, streamed = self.llm.collective_rpc(reload_checked, args=(file_tensors(self.model, self.lora),))[0]
        if streamed != self.elements:  # a tensor left out, or one of a group vLLM stacks into one parameter
            raise RuntimeError(f"the weight stream held {streamed:,} elements of the model's {self.elements:,}: "
                               f"a tensor is missing from it")
        if missing:
            raise RuntimeError(f"the weight stream left {len(missing)} of vLLM's parameters unset ({', '.join(missing[:5])}"
                               f"{', ...' if len(missing) > 5 else ''}): its tensor names do not match the model's files")
        self.llm.reset_prefix_cache()  # cached prompts were computed with the old weights
        if self.sleeps:
            self.llm.wake_up(tags=["kv_cache"])

    def close(self) -> None:
        with signal_mask_kept():
            shut_down(self.llm)
        del self.llm
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def allocator_settings_for_vllm() -> None:
    """vLLM's sleep-mode pool reads the allocator's settings under their old name only, to turn
    expandable segments off around its own allocations (else sleep frees nothing): the pods set the
    new name."""
    if os.environ.get("PYTORCH_ALLOC_CONF") and not os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = os.environ["PYTORCH_ALLOC_CONF"]


def shut_down(llm) -> None:
    """Shut an engine down and destroy vLLM's process groups, which live in module globals
    (`vllm.distributed.parallel_state`): an engine made after an in-place resize builds its own.
    vLLM's shutdown also destroys the default process group, which is the trainer's: kept."""
    original = dist.destroy_process_group

    def all_but_the_default(group=None):
        if group is not None and group is not dist.group.WORLD:
            original(group)

    dist.destroy_process_group = all_but_the_default  # what vLLM's shutdown calls, for the time of it
    try:
        llm.llm_engine.engine_core.shutdown()
    finally:
        dist.destroy_process_group = original


def reload_checked(worker, weights: Iterator[tuple[str, torch.Tensor]]) -> tuple[list[str], int]:
    """Run in the engine's worker (`collective_rpc`): vLLM's reload of `weights` in the checkpoint's
    format; the names of the engine's parameters it left unset (vLLM itself only logs those) and the
    elements streamed."""
    model = worker.model_runner.get_model()
    expected = {name for name, _ in model.named_parameters()}
    loaded: set[str] = set()
    load = model.load_weights

    def recording(stream):
        names = load(stream)
        loaded.update(expected if names is None else names)  # a model that does not say what it loaded: trusted
        return names

    streamed: list[str] = []
    elements = 0

    def named(stream):
        nonlocal elements
        for name, tensor in stream:
            streamed.append(name)
            elements += tensor.numel()
            yield name, tensor

    model.load_weights = recording
    try:
        worker.reload_weights(weights_iterator=named(weights), is_checkpoint_format=True)
    except Exception as e:  # vLLM's loaders fail on an unknown name with whatever the lookup raised
        raise RuntimeError(f"vLLM could not load the streamed tensor {streamed[-1] if streamed else None!r} "
                           f"({type(e).__name__}: {e}): its name does not match the model's files") from None
    finally:
        del model.load_weights
    return sorted(expected - loaded), elements


def not_rotary(record: logging.LogRecord) -> bool:
    """vLLM's reload warns at every sync that each rotary embedding "failed to load weights": its
    tables are computed from the config, never loaded, and vLLM keeps them. Only that line is dropped."""
    return not (record.args and "RotaryEmbedding" in str(record.args[0]) and "Failed to load" in record.msg)


@contextmanager
def trainer_state_kept():
    """vLLM's start in this process reseeds the global random generators and points the compile
    caches elsewhere: the trainer's restored after."""
    variables = {name: os.environ.get(name) for name in TRAINER_VARIABLES}
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        for name, value in variables.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
