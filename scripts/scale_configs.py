"""The 8-GPU scale configs of scale_configs/ (gpu8_*.yaml), written from one description:

    python scripts/scale_configs.py    # rewrites them; tests/test_defaults.py checks they are current

SFT and DPO keep the global batch at 128 at every size. The vendor's elastic LoRA SFT and DPO recipes
(sagemaker-hyperpod-recipes) come in families by their micro-batch M: at the sizes where 8 ranks
per node split 128 evenly below 16 nodes (1, 2, 4, 8) the micro-batch is min(M, the local batch);
at 16 nodes (one sample per rank) it is the recipe's; the family with M >= 4 also runs at 6 nodes
and the one with M = 8 at 3 nodes, with the most even per-rank split written out as the vendor
writes it. Full-parameter SFT states only the global batch, at every size its recipes use; GRPO
only the sizes (its recipes' prompts per step differ).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
GLOBAL_BATCH, GPUS_PER_NODE = 128, 8
VENDOR_SIZES = (1, 2, 4, 8, 16)

VENDOR_HEADER = """\
# The vendor's elastic {method} scale configs (sagemaker-hyperpod-recipes) on 8-GPU nodes
# (ml.p4d/p4de.24xlarge, ml.p5*.48xlarge, ml.g5/g6.48xlarge): global batch 128 at every size, the
# vendor's micro-batches and uneven per-rank batches. The learning rate is the recipe's (the vendor's
# is the same at every size). On 4-GPU nodes the uneven entries do not apply: see docs/recipes.md, Instance types.
"""
SFT_HEADER = """\
# Full-parameter SFT on 8-GPU nodes: global batch 128 at every size, the recipe's micro-batch; sizes whose
# ranks do not divide 128 get the most even per-rank split (derived). Recipes start where the model fits.
"""
GRPO_HEADER = """\
# GRPO on 8-GPU nodes: the sizes its recipes may run at, each with the recipe's prompts per step
# (train_batch_size), micro-batch and learning rate; sizes whose ranks do not divide the prompts get
# the most even per-rank split (derived). Each recipe's elastic policy picks the sizes where both
# phases fit and every rank holds a prompt of every update (train_batch_size / mini_batches ranks at most).
"""
GENERATED = "# Written by scripts/scale_configs.py: edit the description there and rerun it.\n"

# name -> (method as the header names it, micro-batch M or None where the vendor states none)
VENDOR_FAMILIES = {
    "gpu8_dpo_micro1": ("DPO", None),
    "gpu8_dpo_micro2": ("DPO", 2),
    "gpu8_dpo_micro4": ("DPO", 4),
    "gpu8_sft_lora_micro2": ("LoRA SFT", 2),
    "gpu8_sft_lora_micro4": ("LoRA SFT", 4),
    "gpu8_sft_lora_micro8": ("LoRA SFT", 8),
}
FULL_SFT_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


def vendor_entry(nodes: int, micro: int | None) -> dict:
    ranks = nodes * GPUS_PER_NODE
    small, remainder = divmod(GLOBAL_BATCH, ranks)
    args: dict = {"train_batch_size": GLOBAL_BATCH}
    if remainder:
        args["uneven_batch"] = {"use_uneven_batch": True, "num_dp_groups_with_small_batch_size": ranks - remainder,
                                "small_local_batch_size": small, "large_local_batch_size": small + 1}
    elif micro is not None and small > 1:
        args["micro_train_batch_size"] = min(micro, small)
    return {"training_config": {"training_args": args}}


def vendor_sizes(micro: int | None) -> list[int]:
    extra = [6] * bool(micro and micro >= 4) + [3] * bool(micro and micro >= 8)
    return sorted({*VENDOR_SIZES, *extra})


def files() -> dict[str, str]:
    """File name -> its text, for every generated scale config."""
    def text(header: str, entries: dict) -> str:
        return header + GENERATED + yaml.safe_dump(entries, sort_keys=False)

    out = {f"{name}.yaml": text(VENDOR_HEADER.format(method=method),
                                {f"n{n}": vendor_entry(n, micro) for n in vendor_sizes(micro)})
           for name, (method, micro) in VENDOR_FAMILIES.items()}
    out["gpu8_sft.yaml"] = text(SFT_HEADER, {f"n{n}": {"training_config": {"training_args": {
        "train_batch_size": GLOBAL_BATCH}}} for n in FULL_SFT_SIZES})
    out["gpu8_grpo.yaml"] = text(GRPO_HEADER, {f"n{n}": {} for n in FULL_SFT_SIZES})
    return out


if __name__ == "__main__":
    for name, content in files().items():
        (ROOT / "scale_configs" / name).write_text(content)
        print(f"wrote scale_configs/{name}", file=sys.stderr)
