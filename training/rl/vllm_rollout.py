"""GRPO's rollouts on vLLM (`method_args.rollout_engine: vllm`, GPUs only): one engine per training
process on the training GPUs (vLLM's `external_launcher`: the engine lives in the trainer's process
and joins its torch.distributed world; `rollout_tensor_parallel_size` consecutive ranks of a node
form one engine), asleep while the policy trains.

Each rollout wakes the engine, streams the new weights into it from the FSDP shards one tensor at
a time (never a full model copy beside the sharded one; with LoRA the adapters are folded into their
base weights: vLLM lacks LoRA for several of the catalogue's architectures), generates, and puts it
back to sleep at level 1 (weights to host memory, KV cache freed) before the updates. Every
completion is its own request with its own seed (training.rl.sampling's), so under vLLM's batch
invariance (`VLLM_BATCH_INVARIANT=1`) a completion does not depend on which requests shared its
batch, nor on the world size. The importance ratio's log-probabilities come from the trainer's own
forward (training.methods.grpo), never from vLLM's, whose numerics differ; vLLM's own serve the
rollout correction (method_args.rollout_correction), which weighs that difference.

vLLM is imported only when this engine is built: CPU installs and the launcher never need it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from training.model.stored_layout import file_tensors
from training.rl.rollout import Completion, PromptGroup, never
from training.rl.sampling import SamplingParams, completion_seed


@dataclass(frozen=True)
class VLLMOptions:
    tensor_parallel_size: int = 1  # ranks per engine, within a node
    gpu_memory_utilization: float = 0.6  # of each GPU, for the engine's weights and KV cache while awake
    max_num_seqs: int = 1024  # requests an engine runs at once


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
    their tensor-parallel groups through the trainer's process group)."""

    def __init__(self, model, model_path: str, options: VLLMOptions, seed: int, max_model_len: int, lora: bool):
        import os

        from vllm import LLM

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process, as external_launcher needs
        self.model, self.options, self.seed, self.lora = model, options, seed, lora
        tp = options.tensor_parallel_size
        rank, world = dist.get_rank(), dist.get_world_size()
        self.tp_group = dist.new_subgroups_by_enumeration([list(range(r, r + tp)) for r in range(0, world, tp)])[0] \
            if tp > 1 else None
        self.llm = LLM(model=model_path, tensor_parallel_size=tp, distributed_executor_backend="external_launcher",
                       gpu_memory_utilization=options.gpu_memory_utilization, max_num_seqs=options.max_num_seqs,
                       max_model_len=max_model_len, enable_sleep_mode=True, seed=rank // tp, dtype=torch.bfloat16)
        self.llm.sleep(level=1)
        self.sync_s = 0.0

    def generate(self, groups, n, params, step, interrupted: Callable[[], bool] = never):
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        mine = len(groups)
        if self.tp_group is not None:  # an engine's ranks all send it the same requests: the group's prompts
            gathered = [None] * self.options.tensor_parallel_size
            dist.all_gather_object(gathered, groups, group=self.tp_group)
            start = sum(len(g) for g in gathered[:dist.get_rank() % self.options.tensor_parallel_size])
            groups = [g for part in gathered for g in part]
        else:
            start = 0
        started = time.perf_counter()
        self._wake_with_new_weights()
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
            self.llm.sleep(level=1)
        yield from done[start:start + mine]

    def _agreed(self, stop: bool) -> bool:
        """Whether any rank of this engine stops: its ranks must make the same calls."""
        if self.tp_group is None:
            return stop
        flag = torch.tensor([float(stop)], device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.tp_group)
        return bool(flag.item())

    def _wake_with_new_weights(self) -> None:
        """Weights first (their memory back), then the new values streamed in, then the KV cache."""
        self.llm.wake_up(tags=["weights"])
        engine_model = self.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
        engine_model.load_weights(file_tensors(self.model, merge_adapters=self.lora))  # one tensor at a time
        self.llm.wake_up(tags=["kv_cache"])
