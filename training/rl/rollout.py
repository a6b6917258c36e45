"""Completions for a step's prompts. `RolloutEngine` is the one interface the GRPO method calls; the
engine here samples from the trainer's own sharded model, which serves every size on CPU and small
GPU runs (an inference engine can stand behind the same interface).

Every rank gathers the full model once per rollout (one all-gather per FSDP unit, all ranks
together) and then generates its own groups with no further collective, so ranks with fewer or
shorter groups never hold the others up. A group (the `n` completions of one prompt) is generated
as one batch of `n` rows that share the prompt, prefilled once (its cache repeated for the rows): no
padding, a shape that depends on the group only, so the same prompt at the same step yields the same
tokens bitwise at any world size and in any company (training.rl.sampling gives each completion its
own random stream)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import torch

from training.rl.sampling import SamplingParams, completion_generator, next_tokens


@dataclass(frozen=True)
class PromptGroup:
    sample_id: int  # the prompt's row in the training data: with the step, it seeds its completions
    prompt_ids: tuple[int, ...]
    # An agent's episode: the prompt as the data gives it and the row's columns (its environment's reset)
    episode: dict | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Completion:
    sample_id: int
    index: int  # which of the group's completions
    token_ids: tuple[int, ...]  # up to and including the stop token (an agent's: every turn and every reply)
    stopped: bool  # ended on a stop token; False: cut at max_new_tokens
    # The sampler's log-probability of each token (untempered, NaN where it gave none), when asked for
    # (SamplingParams.log_probs); not part of what makes two completions the same.
    log_probs: tuple[float, ...] = field(default=(), compare=False)
    # An agent's trajectory: 1 on the model's own tokens, 0 on its tools' replies (empty: all the model's);
    # its own prompt where the environment's first observation extended the group's
    loss_mask: tuple[int, ...] = ()
    prompt_ids: tuple[int, ...] | None = None
    trace: object = field(default=None, compare=False)  # training.rl.agent_rollout.Trace: turns, calls, timings


def never() -> bool:
    return False


class RolloutEngine(Protocol):
    sync_s: float  # how long the last rollout took to bring the policy's weights to the sampler

    def generate(self, groups: list[PromptGroup], n: int, params: SamplingParams, step: int,
                 interrupted: Callable[[], bool] = never) -> Iterator[list[Completion]]:
        """`n` completions for each prompt of this rank, yielded group by group in the order given.
        Once `interrupted()` is true it yields no more (the caller sees fewer groups than it gave).
        Every rank iterates it to its end, with or without groups: its collectives run there."""

    def close(self) -> None:
        """Release what the engine holds beyond the trainer's model, before the process group goes."""


class ShardedModelRollout:
    """Samples from the trainer's FSDP-sharded `CausalLM` (training.model.causal_lm) with a KV cache."""

    def __init__(self, model, device: torch.device, seed: int):
        self.model, self.device, self.seed = model, device, seed
        self.sync_s = 0.0

    def close(self) -> None:
        pass

    def generate(self, groups, n, params, step, interrupted=never):
        with self.session():
            for group in groups:
                prompt = torch.tensor(group.prompt_ids, device=self.device)
                generators = [completion_generator(self.seed, group.sample_id, i, step) for i in range(n)]
                rows = self.sample(prompt, generators, params, params.max_new_tokens, interrupted)
                if rows is None:
                    return
                yield [Completion(group.sample_id, i, tuple(t), s, tuple(lp) if params.log_probs else ())
                       for i, (t, s, lp) in enumerate(rows)]

    @contextmanager
    def session(self):
        """The gathered model for a rollout's generation (its collectives: every rank enters it)."""
        started = time.perf_counter()
        with torch.no_grad(), gathered(self.model):
            if self.device.type == "cuda":
                torch.cuda.synchronize()  # the all-gathers done, not only queued
            self.sync_s = time.perf_counter() - started
            yield

    def sample(self, prompt: torch.Tensor, generators: list[torch.Generator], params: SamplingParams,
               max_new_tokens: int, interrupted: Callable[[], bool] = never) -> list[tuple] | None:
        """One row per generator, all continuing `prompt` (in a session): each row's (tokens, whether it
        ended on a stop token, log-probabilities or Nones); None once `interrupted()` is true."""
        n = len(generators)
        tokens: list[list[int]] = [[] for _ in range(n)]
        log_probs: list[list[float]] = [[] for _ in range(n)]
        stopped, stop_ids = [False] * n, set(params.stop_token_ids)
        if interrupted():
            return None
        # The rows share the prompt: prefilled once where the model's cache can be repeated for them.
        shared = n > 1 and self.model.prefills_once
        ids = prompt.unsqueeze(0) if shared else prompt.expand(n, -1)
        positions = torch.arange(len(prompt), device=self.device).expand(ids.shape[0], -1)
        logits, cache = self.model(ids, positions, cache=None, rows=n if shared else 1)
        end = len(prompt) + max_new_tokens
        for position in range(len(prompt), end):
            drawn = next_tokens(logits, params, generators)
            drawn_log_probs = torch.log_softmax(logits.float(), dim=-1).gather(-1, drawn.unsqueeze(-1)).squeeze(-1) \
                .tolist() if params.log_probs else [None] * n
            for row, (token, log_prob) in enumerate(zip(drawn.tolist(), drawn_log_probs)):
                if not stopped[row]:
                    tokens[row].append(token)
                    log_probs[row].append(log_prob)
                    stopped[row] = token in stop_ids
            if all(stopped) or position + 1 == end:
                break
            if interrupted():
                return None
            # A finished row keeps decoding (its tokens are dropped): the batch keeps its shape.
            logits, cache = self.model(drawn.unsqueeze(1), torch.full((n, 1), position, device=self.device), cache=cache)
        return list(zip(tokens, stopped, log_probs))


@contextmanager
def gathered(model):
    """Every FSDP unit's parameters gathered for the block (one all-gather each, on every rank at
    once) and kept so across its forwards; the training layout of resharding is restored after."""
    from torch.distributed.fsdp import FSDPModule

    from training.model.causal_lm import reshard_after_forward

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    try:
        yield model
    finally:
        for unit in units:
            unit.reshard()
        reshard_after_forward(model)
