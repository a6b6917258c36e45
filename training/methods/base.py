"""The interface every training method implements (see training.methods)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from training.batches import BatchShape


def model_inputs(micro: dict, device) -> dict:
    """The tensors of a collated micro-batch that the model takes, on `device`."""
    return {k: micro[k].to(device, non_blocking=True) for k in ("input_ids", "position_ids", "labels", "document_ids")
            if k in micro}


def reducing_on_the_last(model, micro_batches: list[dict]):
    """The step's micro-batches, with HSDP's all-reduce across nodes on the last one's backward only:
    the replicas' gradients cross the network once per step, not once per micro-batch. FSDP's
    reduce-scatter within the shard group still runs per micro-batch: skipping it would hold every
    layer's unsharded gradient until the last backward."""
    for i, micro in enumerate(micro_batches):
        model.set_requires_all_reduce(i == len(micro_batches) - 1)
        yield micro


def _no() -> bool:
    return False


@dataclass(frozen=True)
class RunInfo:
    """What a method may need of the run beyond its model: the tokenizer, the batch plan at this
    size, this process's data-parallel rank, and the run's stop: whether this rank was asked to
    stop, and whether any rank was (a collective)."""

    tokenizer: object
    plan: object  # training.contract.batching.BatchPlan
    rank: int
    stop_requested: Callable[[], bool] = _no
    agree_stop: Callable[[], bool] = _no
    model_path: str | None = None  # model_name_or_path: the files an inference engine loads
    run_dir: Path | None = None  # the run's (shared) directory: what an inference engine writes
    compute_dtype: torch.dtype = torch.float32  # what the forward computes in (mixed_precision)
    train_rows: int = 0  # the training data's rows (an epoch's samples)
    template_kwargs: dict | None = None  # the chat template's arguments (enable_thinking), as the data renders it
    audit: bool = False  # logging.audit_samples: keep what reproduces the run (a judge's every verdict)
    checkpoint_uri: str | None = None  # checkpoint.uri: where what a resume needs lives (S3), if not the run's volume
    # What GRPO's rollout processes (training.rl.rollout_ranks) build their model from and draw ahead
    model_config: object = None  # training_config.model_config
    model_source: str | None = None  # the model's files on this node (None: an inline architecture)
    nodes: int = 1
    step: int = 0  # the steps taken when the method is prepared (a resume's)
    prompts_at: Callable[[int, int], list[dict]] | None = None  # (step, rank): that rank's prompt rows of that step
    max_steps: int = 0  # the schedule's steps: none is drawn past them


@dataclass
class MethodStep:
    """A step as its method planned it: the optimizer updates, each a list of micro-batches (the same
    count on every rank), and the method's own record of the step (GRPO: its experience), which the
    trainer hands back to the step's statistics, audit and warnings: nothing of a step stays on the method."""

    updates: list[list[dict]]
    state: Any = None


class TrainingMethod:
    data_format: str  # how training.data encodes a row: "chat" (one conversation) or "pairs" (chosen/rejected)
    reference_forwards = 0  # forward passes without gradients per trained sequence (for the FLOPs count)

    rows_per_sample = 1  # rows of a micro-batch per sample (DPO: chosen and rejected)
    prompt_limit: int | None = None  # prompt rows (GRPO): longer prompts are left out of the data
    prompt_tools: list[dict] | None = None  # an agent's tools (JSON schemas): its prompts offer them

    def __init__(self, args, options, device: torch.device, shape: BatchShape | None = None):
        self.args = args  # TrainingArgs
        self.options = options  # the method's own keys: its module's `Args`, from training_args.method_args
        self.device = device
        self.shape = shape  # what every micro-batch is padded to (training.batches.BatchShape); None: as it comes

    def prepare(self, model: torch.nn.Module, frozen_copy: Callable[[], torch.nn.Module], run: RunInfo | None = None) -> None:
        """Called once the model is built and resumed; `frozen_copy()` builds a frozen, sharded copy
        of the initial model for a method that compares against one."""

    def close(self) -> None:
        """Release what the method holds outside the model (processes, files) when its size ends."""

    def checkpoint_state(self, model: torch.nn.Module) -> dict:
        """What of the method a checkpoint holds beside the model and optimizer, as tensors a load fills in
        place (sharded like the model's); {} for none. Asked before `prepare` on a resume (to load into)
        and at every save (GRPO running behind: the policies its next rollouts are drawn by)."""
        return {}

    def checkpointed(self, step: int) -> None:
        """The checkpoint of `step` is complete: what only a resume from an earlier one needed may go
        (GRPO: its judge's verdicts of the steps it holds)."""

    def collate(self, rows: list[dict]) -> dict:
        """A padded micro-batch (of `self.shape`) with host-side `label_tokens`, `tokens` and `sample_ids`."""
        raise NotImplementedError

    def updates(self, model, micro_batches: list[dict], step: int) -> MethodStep | None:
        """The step's optimizer updates: one for SFT and DPO; GRPO generates and scores first, then
        splits its experience. None, on every rank, when a stop came before any update: the step is
        abandoned (and redone after a restart)."""
        return MethodStep([micro_batches])

    def step_stats(self, step: MethodStep) -> dict:
        """Sums of the step beyond its updates' (GRPO's experience) by name, summed over ranks by the
        trainer (training.runtime.named_sums) and handed to step_metrics with the updates' sums."""
        return {}

    def watch(self, record: dict, step: MethodStep) -> list[str]:
        """Warnings that this step's metrics record makes true (each said once a run): where a run
        cannot learn as configured (GRPO: training.rl.learning_signals)."""
        return []

    def warnings(self) -> list[str]:
        """Every warning `watch` has given in this process."""
        return []

    def failing(self) -> str | None:
        """Why the run must stop after this step (checkpointed first), once `watch` has seen it: GRPO's
        judge that failed every verdict for `max_failed_steps` steps."""
        return None

    def audited(self, step: MethodStep) -> dict[str, list]:
        """What samples.jsonl records of this rank's step beyond its sample ids (logging.audit_samples),
        as lists the trainer joins over ranks: GRPO's completions."""
        return {}

    def forward_backward(self, model, micro_batches: list[dict], label_tokens: torch.Tensor, global_batch: int,
                         documents: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward over the step's micro-batches, each loss scaled by the step's counts
        over every rank (label tokens, samples, packed documents): FSDP sums the ranks' gradients, so
        the step's gradient is the fixed-size run's at every data-parallel size, and a micro-batch's
        is the same number at every size. Returns (local loss sum, local sums of the method's step
        statistics by name), both summed over ranks by the trainer."""
        raise NotImplementedError

    def step_metrics(self, loss_sum: float, sums: dict[str, float], label_tokens: float, global_batch: int) -> dict:
        """The step's `loss` and the method's own metrics, from the sums by name over every rank."""
        raise NotImplementedError

    def eval_sums(self, model, batch: dict, step: int) -> dict:
        """One validation micro-batch's sums by name, summed over batches and ranks, after `step` steps."""
        raise NotImplementedError

    def eval_metrics(self, sums: dict[str, float]) -> dict:
        """The evaluation record's metrics (`eval_loss`, ...) from the summed `eval_sums`."""
        raise NotImplementedError
