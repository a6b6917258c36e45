"""The training entrypoint: restart -> this size's config -> resume -> steps -> (elastic event) save, exit 0.

Run under torchrun or hyperpodrun (`-m training --config-dir DIR`); every (re)start reads the live
world size, so the same command serves every size the job is resized to.
"""

from __future__ import annotations

import time
import warnings

PROCESS_START = time.time()  # before the heavy imports: the rehearsal measures restart cost from here

import argparse  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402

from training.checkpoint import Checkpointer, TrainState, bytes_on_disk, latest_checkpoint  # noqa: E402
from training.config import (CONFIG_DIR_ENV, NUM_NODES_ENV, BatchPlan, JobConfig, TrainingArgs,  # noqa: E402
                             load_job_config, plan_batches, select_config_file)
from training.data import IGNORE_INDEX, collate, load_or_build  # noqa: E402
from training.elastic import ElasticStop, die_with_parent  # noqa: E402
from training.metrics import MetricsLogger, flops_per_token, peak_flops, peak_memory_gib  # noqa: E402
from training.model import build_sharded_model, count_parameters  # noqa: E402
from training.sampler import GlobalBatchSampler  # noqa: E402

warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # torchdata 0.11 noise


@dataclass(frozen=True)
class Topology:
    rank: int
    local_rank: int
    world_size: int
    nodes: int

    @classmethod
    def from_env(cls) -> "Topology":
        if "WORLD_SIZE" not in os.environ:  # plain `python -m training`: a world of one
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        world = int(os.environ["WORLD_SIZE"])
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        nodes = int(os.environ.get(NUM_NODES_ENV) or max(1, world // local_world))
        return cls(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0)), world, nodes)


def lr_factor(step: int, args: TrainingArgs) -> float:
    """Linear warmup, then cosine decay to min_learning_rate, as a function of the global step only."""
    if step < args.warmup_steps:
        return (step + 1) / args.warmup_steps
    progress = min(1.0, (step - args.warmup_steps) / max(1, args.max_steps - args.warmup_steps))
    floor = args.min_learning_rate / args.learning_rate if args.learning_rate else 0.0
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def fingerprint(cfg: JobConfig, dataset_len: int) -> dict:
    """Settings a resumed run must share with its checkpoint for the data stream to continue."""
    ta, ds = cfg.training_config.training_args, cfg.training_config.datasets
    return {"train_batch_size": ta.train_batch_size, "max_len": ds.max_len, "train_data": ds.train_data,
            "packing": ds.packing, "dataset_len": dataset_len, "seed": ta.seed}


def train_step(model, micro_batches: list[dict], device, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward/backward over the step's micro-batches. The summed token loss is divided by the
    global label-token count of the step (all-reduced before backward) and multiplied by the DP size
    that FSDP's gradient averaging divides by, so the gradient equals the fixed-size run's whatever
    the DP size or the split. Returns (local loss sum, global [label tokens, input tokens])."""
    real = [m for m in micro_batches if m["sample_ids"]]  # padding micro-batches count no tokens
    local = torch.tensor([sum(int((m["labels"] != IGNORE_INDEX).sum()) for m in real),
                          sum(int(m["attention_mask"].sum()) for m in real)], dtype=torch.float64, device=device)
    dist.all_reduce(local)
    label_tokens = local[0]
    loss_sum = torch.zeros((), device=device)
    for micro in micro_batches:
        logits = model(input_ids=micro["input_ids"].to(device),
                       attention_mask=micro["attention_mask"].to(device)).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), micro["labels"].to(device).flatten(),
                               ignore_index=IGNORE_INDEX, reduction="sum")
        (loss * (world_size / label_tokens.float())).backward()
        loss_sum += loss.detach()
    return loss_sum, local


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training", description=__doc__)
    parser.add_argument("--config-dir", default=os.environ.get(CONFIG_DIR_ENV, "/config"),
                        help=f"directory of config.yaml and config-n<N>.yaml (env {CONFIG_DIR_ENV})")
    parser.add_argument("--run-dir", help="override run.output_dir (checkpoints/, metrics.jsonl)")
    parser.add_argument("--stop-at-step", type=int, help="checkpoint and exit after this step (schedule unchanged)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    die_with_parent()
    stop = ElasticStop()
    topo = Topology.from_env()
    config_path, own_file = select_config_file(args.config_dir, topo.nodes)
    cfg = load_job_config(config_path)
    tc, ta = cfg.training_config, cfg.training_config.training_args
    plan: BatchPlan = plan_batches(ta, topo.world_size)

    on_gpu = torch.cuda.is_available()
    device = torch.device("cuda", topo.local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=float(os.environ.get("ELASTIC_PG_TIMEOUT_S", 1800)))
    dist.init_process_group("cpu:gloo,cuda:nccl" if on_gpu else "gloo", timeout=timeout, device_id=device if on_gpu else None)
    mesh = init_device_mesh(device.type, (topo.world_size,))

    run_dir = Path(args.run_dir or cfg.run.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rank0 = topo.rank == 0
    log = MetricsLogger(run_dir, rank0, tc.logging.tensorboard, tc.logging.audit_samples,
                        launch_id=f"{int(PROCESS_START * 1000)}")
    log.event(event="start", process_start=PROCESS_START, world_size=topo.world_size, nodes=topo.nodes,
              config=config_path.name, derived_batch_math=not own_file, per_rank_batch=list(plan.local_batches),
              micro_batch=plan.micro_batch, grad_accum=plan.grad_accum_steps)

    from transformers import AutoTokenizer

    tokenizer_name = tc.model_config.tokenizer_name_or_path or tc.model_config.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
    dataset = load_or_build(tc.datasets, tokenizer, tokenizer_name, run_dir / "data_cache",
                            builder=topo.local_rank == 0)
    if tc.model_config.architecture is not None and "vocab_size" not in tc.model_config.architecture:
        tc.model_config.architecture["vocab_size"] = len(tokenizer)
    resuming = latest_checkpoint(run_dir / "checkpoints") is not None
    model = build_sharded_model(tc.model_config, ta.seed, mesh, tc.model_config.mixed_precision, on_gpu, resuming)
    _, non_embedding = count_parameters(model)
    model_flops = flops_per_token(non_embedding, model.config.num_hidden_layers, model.config.hidden_size,
                                  tc.datasets.max_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=ta.learning_rate, betas=(ta.adam_beta1, ta.adam_beta2),
                                  weight_decay=ta.weight_decay, foreach=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, ta))

    ckpt_cfg = tc.checkpoint
    checkpointer = Checkpointer(run_dir / "checkpoints", ckpt_cfg.keep_last, ckpt_cfg.async_save, topo.rank,
                                topo.world_size)
    fp = fingerprint(cfg, len(dataset))
    state = checkpointer.load(model, optimizer, scheduler, fp, ckpt_cfg.ignore_fingerprint)
    if state is not None:
        log.event(event="resume", step=state.step, from_world_size=state.world_size, world_size=topo.world_size,
                  consumed_samples=state.consumed_samples,
                  **{f"load_{k}_s": round(v, 3) for k, v in checkpointer.load_seconds.items()})
    state = TrainState(state.step if state else 0, state.consumed_samples if state else 0, topo.world_size, fp)

    from torchdata.stateful_dataloader import StatefulDataLoader

    # The loader only prefetches; its position comes from the sampler's global counter, never from a
    # restored per-rank loader state (which does not survive a resize).
    sampler = GlobalBatchSampler(len(dataset), plan, topo.rank, ta.seed, state.consumed_samples)
    loader = iter(StatefulDataLoader(dataset, batch_sampler=sampler, collate_fn=collate,
                                     num_workers=tc.datasets.num_workers))
    last_step = min(args.stop_at_step or ta.max_steps, ta.max_steps)
    peak = peak_flops(device)
    model.train()
    while state.step < last_step:
        started = time.perf_counter()
        micro_batches = [next(loader) for _ in range(plan.grad_accum_steps)]
        loss_sum, tokens = train_step(model, micro_batches, device, topo.world_size)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), ta.max_grad_norm, foreach=True)
        grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        state.step += 1
        state.consumed_samples += plan.global_batch
        # One collective for the logged loss, the elastic-event agreement and async-save completion.
        flags = torch.tensor([float(stop.requested), float(checkpointer.writing)], dtype=torch.float64, device=device)
        stats = torch.cat([loss_sum.double().reshape(1), flags])
        dist.all_reduce(stats)
        elapsed = time.perf_counter() - started
        if tc.logging.audit_samples:
            ids = [sid for m in micro_batches for sid in m["sample_ids"]]
            gathered = [None] * topo.world_size if rank0 else None
            dist.gather_object(ids, gathered, dst=0)
            if rank0:
                log.samples(state.step, topo.world_size, [sid for part in gathered for sid in part])
        if state.step % tc.logging.log_every == 0 or state.step == last_step:
            tps = float(tokens[1]) / elapsed
            record = {"step": state.step, "loss": float(stats[0] / tokens[0]), "lr": lr,
                      "grad_norm": float(grad_norm), "tokens": int(tokens[1]), "label_tokens": int(tokens[0]),
                      "tokens_per_s": tps, "tokens_per_s_per_device": tps / topo.world_size, "step_time": elapsed,
                      "world_size": topo.world_size, "consumed_samples": state.consumed_samples,
                      "peak_memory_gib": peak_memory_gib(device)}
            if peak:
                record["mfu"] = model_flops * tps / topo.world_size / peak
            log.log(record)
        if checkpointer.pending and stats[2] == 0:  # every rank's background write is done
            checkpointer.wait()
        stopping = bool(stats[1] > 0)
        if stopping or state.step == last_step or state.step % ckpt_cfg.save_steps == 0:
            saved_at = time.time()
            path = checkpointer.save(model, optimizer, scheduler, state, blocking=stopping or state.step == last_step)
            if stopping or state.step == last_step:
                log.event(event="checkpoint", step=state.step, seconds=time.time() - saved_at,
                          bytes=bytes_on_disk(path) if rank0 else 0)
        if stopping:
            log.event(event="stop", step=state.step, signal=stop.signal_name or "peer")
            break
    checkpointer.wait()
    log.event(event="exit", step=state.step)
    log.close()
    dist.destroy_process_group()
    return 0
