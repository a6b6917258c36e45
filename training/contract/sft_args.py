"""SFT's facts and keys, torch-free: the launcher reads them without importing the method
(training/methods/sft.py)."""

from __future__ import annotations

from dataclasses import dataclass

SEQUENCES_PER_SAMPLE = 1
PACKING = True  # samples may share a row: each keeps its own attention and labels
DATA_FORMAT = "chat"
FUSED_LOSS = True  # the loss fused with the LM head (training.model.loss): the plan counts what it holds


@dataclass
class Args:  # training_args.method_args: SFT has none
    pass
