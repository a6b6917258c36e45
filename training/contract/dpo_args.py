"""DPO's facts and keys, torch-free: the launcher reads them without importing the method
(training/methods/dpo.py)."""

from __future__ import annotations

from dataclasses import dataclass

from training.contract.typed import one_of, ranged

SEQUENCES_PER_SAMPLE = 2  # chosen and rejected
PACKING = False  # pairs are compared sequence by sequence
DATA_FORMAT = "pairs"


@dataclass
class Args:  # training_args.method_args
    beta: float = ranged(0.1, gt=0)  # strength of the pull towards the reference model
    loss_type: str = one_of("sigmoid", "hinge", "ipo")  # the loss on the reward margin
