"""Training methods, one module each, named as the `training_args.trainer_type` that selects it.

A method decides what differs between SFT, DPO and their kin: how a row is encoded and batched,
the loss and its gradient over a step's micro-batches, the metrics of a step and of an evaluation,
and any frozen model it compares against. The trainer owns the rest (data order, sharding,
optimizer, LR schedule, checkpoints, export). A new method is one module here: METHOD (a
`TrainingMethod` subclass), its `Args` dataclass (its keys, set as training_args.method_args) and
its facts (SEQUENCES_PER_SAMPLE, PACKING, ...: training.contract.methods), which the project's own
methods keep torch-free in training/contract/<name>_args.py. Nothing else names a method.
"""

from __future__ import annotations

import importlib


def load_method(args, device, micro_batch: int | None = None, max_len: int | None = None, packed: bool = False):
    """The method `args.trainer_type` names, set up with the run's TrainingArgs, its own arguments
    (training_args.method_args, as its module's `Args`), the device and, where given, the shape of
    its micro-batches: `micro_batch` samples of at most `max_len` tokens (training.batches.BatchShape)."""
    from training.contract.methods import method_facts

    module = importlib.import_module(f"{__name__}.{args.trainer_type}")
    options = method_facts(args.trainer_type).build_args(args.method_args)
    method = module.METHOD(args, options, device)
    if micro_batch is not None:
        from training.batches import BatchShape

        method.shape = BatchShape(micro_batch * method.rows_per_sample, max_len, packed)
    return method
