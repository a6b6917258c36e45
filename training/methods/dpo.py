"""Direct preference optimization (Rafailov et al., 2023) on per-sequence log-probabilities.

The implicit reward of a completion is beta * (log pi(y|x) - log pi_ref(y|x)); the losses push the
chosen completion's reward above the rejected one's:
- sigmoid (DPO):  -log sigmoid(beta * margin)
- hinge (SLiC):   max(0, 1 - beta * margin)
- ipo (IPO):      (margin - 1 / (2 * beta))^2, on log-probabilities averaged per token, as IPO defines it
where margin = (log pi(chosen) - log pi(rejected)) - (log pi_ref(chosen) - log pi_ref(rejected)).

The reference is the model as it started: for LoRA the same weights with the adapters switched off
(no second copy), for full-parameter training a frozen copy. A step always holds `global_batch`
pairs, so the loss is their mean at every size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from training.batches import IGNORE_INDEX, collate_pairs
from training.contract.dpo_args import DATA_FORMAT, SEQUENCES_PER_SAMPLE, Args
from training.methods.base import TrainingMethod, model_inputs, reducing_on_the_last
from training.model.lora import adapter_layers, reference_of
from training.runtime.named_sums import added


@dataclass
class PairScores:
    """Per-pair log-probabilities (summed over each completion's label tokens) and label-token counts."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    ref_chosen: torch.Tensor
    ref_rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor


def dpo_loss(s: PairScores, beta: float, loss_type: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(per-pair loss, chosen reward, rejected reward); the rewards carry no gradient."""
    chosen_ratio, rejected_ratio = s.chosen - s.ref_chosen, s.rejected - s.ref_rejected
    if loss_type == "ipo":
        margin = chosen_ratio / s.chosen_tokens.clamp(min=1) - rejected_ratio / s.rejected_tokens.clamp(min=1)
        losses = (margin - 1 / (2 * beta)) ** 2
    else:
        margin = chosen_ratio - rejected_ratio
        losses = -F.logsigmoid(beta * margin) if loss_type == "sigmoid" else torch.relu(1 - beta * margin)
    return losses, beta * chosen_ratio.detach(), beta * rejected_ratio.detach()


def pair_sums(chosen: torch.Tensor, rejected: torch.Tensor) -> dict:
    """The implicit rewards' sums over pairs: chosen, rejected, and the pairs whose chosen scored higher."""
    return {"chosen": chosen.sum(), "rejected": rejected.sum(), "right": (chosen > rejected).sum().float()}


def reward_stats(sums: dict[str, float], pairs: float) -> dict:
    """Mean implicit rewards of chosen and rejected completions, their margin, and the share of
    pairs whose chosen completion scored higher (from pair_sums summed)."""
    chosen, rejected, right = (sums[k] / max(pairs, 1) for k in ("chosen", "rejected", "right"))
    return {"rewards_chosen": chosen, "rewards_rejected": rejected, "rewards_margin": chosen - rejected,
            "rewards_accuracy": right}


class DPO(TrainingMethod):
    options: Args  # its keys, torch-free for the launcher (training.contract.dpo_args)
    data_format = DATA_FORMAT
    rows_per_sample = SEQUENCES_PER_SAMPLE
    reference_forwards = 1
    reference: torch.nn.Module | None = None  # full-parameter training's frozen copy

    def prepare(self, model, frozen_copy, run=None):
        if not adapter_layers(model):
            self.reference = frozen_copy()

    def pair_scores(self, model, micro: dict) -> tuple[torch.Tensor, PairScores]:
        """(the policy's per-sequence log-probabilities, the pairs' scores) of one micro-batch."""
        batch = model_inputs(micro, self.device)
        n, tokens = micro["pairs"], (batch["labels"] != IGNORE_INDEX).sum(dim=1)
        with torch.no_grad(), reference_of(model, self.reference) as reference:
            ref = reference(**batch, per_sequence=True)
        policy = model(**batch, per_sequence=True)
        return policy, PairScores(policy[:n], policy[n:2 * n], ref[:n], ref[n:2 * n], tokens[:n], tokens[n:2 * n])

    def collate(self, rows):
        return collate_pairs(rows, self.shape)

    def forward_backward(self, model, micro_batches, label_tokens, global_batch, documents=None):
        scale = 1 / global_batch
        loss_sum, sums = torch.zeros((), device=self.device), {}
        for micro in reducing_on_the_last(model, micro_batches):
            policy, scores = self.pair_scores(model, micro)
            losses, chosen, rejected = dpo_loss(scores, self.options.beta, self.options.loss_type)
            ((losses.sum() + 0 * policy.sum()) * scale).backward()  # an empty micro-batch still joins FSDP's collectives
            loss_sum += losses.detach().sum()
            sums = added(sums, pair_sums(chosen, rejected))
        return loss_sum, sums

    def step_metrics(self, loss_sum, sums, label_tokens, global_batch):
        return {"loss": loss_sum / global_batch, **reward_stats(sums, global_batch)}

    def eval_sums(self, model, batch, step):
        _, scores = self.pair_scores(model, batch)
        losses, chosen, rejected = dpo_loss(scores, self.options.beta, self.options.loss_type)
        sums = {"loss": losses.sum(), **pair_sums(chosen, rejected)}
        return {"pairs": float(batch["pairs"]), **{k: v.double() for k, v in sums.items()}}  # float64 over batches

    def eval_metrics(self, sums):
        pairs = sums["pairs"]
        return {"eval_loss": sums["loss"] / max(pairs, 1), **{f"eval_{k}": v for k, v in reward_stats(sums, pairs).items()}}


METHOD = DPO
