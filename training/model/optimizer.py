"""The optimizer, built one way for the trainer and the memory trace."""

from __future__ import annotations

import torch

from training.contract.config import TrainingArgs


def build_optimizer(model: torch.nn.Module, args: TrainingArgs) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (LoRA: the adapters only), its moments sharded like them.
    Fused: one kernel per parameter group, and it skips a step on the device when `found_inf` is set
    (weights, moments and step count unchanged), so the trainer need not read the verdict first."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(trainable, lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2),
                             weight_decay=args.weight_decay, fused=True)
