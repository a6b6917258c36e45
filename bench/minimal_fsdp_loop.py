"""The baseline for bench/train_throughput.py: a minimal hand-written FSDP2 training loop over the
same model config and the same tokenized data, with none of the trainer's machinery (no global
token normalization, no clipping, no elastic agreement, no metrics files). Run under torchrun:

    torchrun --standalone --nproc-per-node=2 bench/minimal_fsdp_loop.py CONFIG_YAML DATASET_DIR STEPS
"""

import os
import sys
import time

import datasets
import torch
import torch.distributed as dist
import yaml
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM


def main(config_path: str, dataset_dir: str, steps: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = yaml.safe_load(open(config_path))["training_config"]
    arch, args = dict(cfg["model_config"]["architecture"]), cfg["training_args"]
    data = datasets.load_from_disk(dataset_dir)
    arch.setdefault("vocab_size", 512)
    torch.manual_seed(args["seed"])
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(arch.pop("model_type"), **arch))
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=args["learning_rate"])
    local = args["train_batch_size"] // world
    micro = args["micro_train_batch_size"]
    marks, tokens = [], 0
    for step in range(steps):
        start = (step * args["train_batch_size"] + rank * local) % (len(data) - local)
        rows = data[start:start + local]
        for m in range(0, local, micro):
            ids = rows["input_ids"][m:m + micro]
            width = max(map(len, ids))
            x = torch.zeros(len(ids), width, dtype=torch.long)
            mask = torch.zeros_like(x)
            labels = torch.full_like(x, -100)
            for i, (seq, lab) in enumerate(zip(ids, rows["labels"][m:m + micro])):
                x[i, :len(seq)], mask[i, :len(seq)], labels[i, :len(seq)] = torch.tensor(seq), 1, torch.tensor(lab)
            loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
            loss.backward()
            tokens += int(mask.sum()) if step >= 5 else 0
        opt.step()
        opt.zero_grad(set_to_none=True)
        marks.append(time.perf_counter())
    total = torch.tensor([tokens], dtype=torch.float64)
    dist.all_reduce(total)
    if rank == 0:
        print(f"TOKENS_PER_S {float(total) / (marks[-1] - marks[4]):.1f}", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    # As the trainer does: skip the interpreter's teardown of gloo's threads, which can abort the
    # process after the result is printed.
    os._exit(0)
