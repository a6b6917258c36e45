"""The baseline for bench/gpu_throughput.py: the fastest plain FSDP2 loop a user would write by hand:
per-decoder-layer `torch.compile`, bf16 compute with fp32 reduction, every row a full `seq` tokens
(no padding, no mask), transformers' own loss. Prints one RESULT line of JSON. Run under torchrun:

    torchrun --standalone --nproc-per-node=1 bench/minimal_compiled_loop.py CONFIG_YAML STEPS
"""

import json
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import yaml
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from training.model.flops import attention_flops, matmul_flops_per_token  # noqa: E402
from training.runtime.metrics import peak_flops, peak_memory  # noqa: E402

WARMUP = 5


@dataclass
class Loop:
    """The loop's model, optimizer and step shape (bench/gpu_profile.py profiles its `step`)."""
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    device: torch.device
    micro: int
    accum: int
    seq: int

    @property
    def tokens_per_step(self) -> int:
        return self.accum * self.micro * self.seq

    def step(self) -> None:
        vocab = self.model.config.vocab_size
        for _ in range(self.accum):
            x = torch.randint(0, vocab, (self.micro, self.seq), device=self.device)
            self.model(input_ids=x, labels=x).loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def build(config_path: str) -> Loop:
    """The process group, the model sharded and compiled per layer, its optimizer."""
    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if on_gpu else "gloo")
    world = dist.get_world_size()
    tc = yaml.safe_load(open(config_path))["training_config"]
    mc, args, seq = tc["model_config"], tc["training_args"], tc["datasets"]["max_len"]
    arch = dict(mc["architecture"])
    torch.manual_seed(args["seed"])
    attn = {"attn_implementation": "sdpa" if arch["model_type"] == "llama" else "eager"}
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(arch.pop("model_type"), **arch), **attn)
    model.config.use_cache = False
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if on_gpu else None
    mesh = init_device_mesh(device.type, (world,))
    for layer in model.model.layers:
        if mc.get("compile", on_gpu) is not False:
            layer.compile()
        fully_shard(layer, mesh=mesh, **({"mp_policy": policy} if policy else {}))
    fully_shard(model, mesh=mesh, **({"mp_policy": policy} if policy else {}))
    opt = torch.optim.AdamW(model.parameters(), lr=args["learning_rate"], foreach=True)
    micro = args["micro_train_batch_size"]
    return Loop(model, opt, device, micro, args["train_batch_size"] // (world * micro), seq)


def main(config_path: str, steps: int) -> None:
    loop = build(config_path)
    world, marks = dist.get_world_size(), []
    for _ in range(steps):
        loop.step()
        if loop.device.type == "cuda":
            torch.cuda.synchronize()
        marks.append(time.perf_counter())
    tokens_per_s = (steps - WARMUP) * loop.tokens_per_step * world / (marks[-1] - marks[WARMUP - 1])
    peak = peak_flops(loop.device)
    if dist.get_rank() == 0:
        flops_per_token = matmul_flops_per_token(loop.model) + attention_flops(loop.model, loop.seq)  # seq^2 / seq tokens
        mfu = flops_per_token * tokens_per_s / world / peak if peak else None
        print("RESULT " + json.dumps({"tokens_per_s": tokens_per_s, "mfu": mfu,
                                      "peak_gib": peak_memory(loop.device)["peak_memory_gib"],
                                      "fill": 1.0}), flush=True)
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
    os._exit(0)  # skip the interpreter's teardown of the process group's threads
