"""Direct preference optimization (Rafailov et al., 2023) on per-sequence log-probabilities.

The implicit reward of a completion is beta * (log pi(y|x) - log pi_ref(y|x)); the losses push the
chosen completion's reward above the rejected one's:
- sigmoid (DPO):  -log sigmoid(beta * margin)
- hinge (SLiC):   max(0, 1 - beta * margin)
- ipo (IPO):      (margin - 1 / (2 * beta))^2, on log-probabilities averaged per token, as IPO defines it
where margin = (log pi(chosen) - log pi(rejected)) - (log pi_ref(chosen) - log pi_ref(rejected)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


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
