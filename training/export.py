"""A Hugging Face model directory from the sharded training model: what a serving stack loads.

Written at the last step when `training_args.save_hf_ckpt` is set, or from any complete checkpoint:

    python -m training.export --checkpoint RUN_DIR/checkpoints/step-N --out DIR [--config FILE]
    torchrun --nproc-per-node=8 -m training.export ...   # a model too large for one process

Parameters are gathered one at a time (each gather a collective on every rank) and rank 0 writes
them into safetensors shards of at most 5 GB, so no rank ever holds more than its own shards, one
gathered tensor and one output shard. For LoRA, `<out>` holds the merged model (W + scaling * B @ A,
with `merge_weights`) and `<out>_adapter` the adapter alone, loadable with peft.PeftModel. Both are
written to a temporary directory first and renamed when complete.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Iterator

import torch

from training.contract.config import JobConfig
from training.model.lora import adapter_config, adapter_tensors, checkpointed_weights
from training.model.stored_layout import file_tensors

SHARD_BYTES = 5 * 10**9


class ShardWriter:
    """Rank 0 collects tensors into safetensors files of at most SHARD_BYTES, named as transformers names them."""

    def __init__(self, out: Path, dtype: torch.dtype, enabled: bool, prefix: str = "model"):
        self.out, self.dtype, self.enabled, self.prefix = out, dtype, enabled, prefix
        self.shard: dict[str, torch.Tensor] = {}
        self.files: list[dict[str, torch.Tensor]] = []
        self.written: list[tuple[Path, list[str]]] = []

    def add(self, name: str, tensor: torch.Tensor) -> None:
        if not self.enabled:
            return
        self.shard[name] = tensor.to("cpu", self.dtype).contiguous()
        if sum(t.numel() * t.element_size() for t in self.shard.values()) >= SHARD_BYTES:
            self._flush()

    def _flush(self) -> None:
        from safetensors.torch import save_file

        if self.shard:
            path = self.out / f"{self.prefix}-part{len(self.written)}.safetensors"
            save_file(self.shard, str(path), metadata={"format": "pt"})
            self.written.append((path, list(self.shard)))
            self.shard = {}

    def close(self) -> None:
        if not self.enabled:
            return
        self._flush()
        if len(self.written) == 1:
            self.written[0][0].rename(self.out / f"{self.prefix}.safetensors")
            return
        index, total = {}, len(self.written)
        for i, (path, names) in enumerate(self.written, 1):
            final = f"{self.prefix}-{i:05d}-of-{total:05d}.safetensors"
            path.rename(self.out / final)
            index.update(dict.fromkeys(names, final))
        (self.out / f"{self.prefix}.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}, indent=1))


def _write(out: Path, tensors: Iterator[tuple[str, torch.Tensor]], dtype, rank0: bool, prefix: str, extra) -> None:
    """Stream `tensors` into `out` (via a temporary directory renamed at the end); `extra(tmp)` adds the rest."""
    import torch.distributed as dist

    tmp = out.with_name(out.name + ".tmp")
    if rank0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    writer = ShardWriter(tmp, dtype, rank0, prefix)
    for name, tensor in tensors:
        writer.add(name, tensor)
    if rank0:
        writer.close()
        extra(tmp)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    dist.barrier()


def write_model_config(model, directory: Path, dtype: torch.dtype) -> None:
    """The trained model's config.json and generation_config.json (what an engine builds it from)."""
    from transformers import GenerationConfig

    config = model.config
    config.architectures, config.use_cache, config.dtype = [model.hf_architecture], True, dtype
    config.save_pretrained(directory)
    GenerationConfig.from_model_config(config).save_pretrained(directory)


def export_hf(model, cfg: JobConfig, out: Path, rank0: bool) -> list[Path]:
    """Write the Hugging Face directories of the trained model (in the dtype it computed in); returns
    the directories written."""
    from transformers import AutoTokenizer

    mc, ta = cfg.training_config.model_config, cfg.training_config.training_args
    dtype = torch.bfloat16 if mc.mixed_precision == "bf16" else torch.float32
    lora = mc.lora

    def model_files(directory: Path) -> None:
        write_model_config(model, directory, dtype)
        AutoTokenizer.from_pretrained(mc.tokenizer_name_or_path or mc.model_name_or_path).save_pretrained(directory)

    written = []
    if not lora or ta.merge_weights:
        _write(out, file_tensors(model, merge_adapters=lora), dtype, rank0, "model", model_files)
        written.append(out)
    if lora:
        config_of_adapters = adapter_config(model, mc.peft_config, mc.model_name_or_path)
        adapter_dir = out.with_name(out.name + "_adapter")
        _write(adapter_dir, adapter_tensors(model), dtype, rank0, "adapter_model",
               lambda d: config_of_adapters.save_pretrained(d))
        written.append(adapter_dir)
    return written


def main(argv=None) -> int:
    """Export one complete checkpoint (under torchrun or as a single process)."""
    from dataclasses import replace

    from torch.distributed.device_mesh import init_device_mesh

    from training.contract.checkpoint_dirs import COMPLETE, complete_checkpoints
    from training.contract.config import load_job_config
    from training.contract.errors import ConfigError, report
    from training.model.causal_lm import build_sharded_model
    from training.runtime.snapshot import model_files
    from training.runtime.topology import Topology, start_process_group
    from training.state.checkpoint import CheckpointError, fingerprint, load_weights

    parser = argparse.ArgumentParser(prog="python -m training.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a complete checkpoint directory (.../checkpoints/step-N)")
    parser.add_argument("--out", required=True, help="the Hugging Face directory to write")
    parser.add_argument("--config", help="the run's training config (default: job_config.yaml in the run directory)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")
    args = parser.parse_args(argv)
    try:
        checkpoint = Path(args.checkpoint)
        if not checkpoint.is_dir():
            found = [p.name for p in complete_checkpoints(checkpoint.parent)]
            raise ConfigError(f"--checkpoint {checkpoint} does not exist: "
                              + (f"complete checkpoints in {checkpoint.parent}: {', '.join(found)}" if found else
                                 "give a step-<8 digits> directory under <run dir>/checkpoints, e.g. step-00000020"))
        if not (checkpoint / COMPLETE).exists():
            raise ConfigError(f"--checkpoint {checkpoint} is not a complete checkpoint (no {COMPLETE} marker): "
                              f"its save was cut short; export the previous step-N directory")
        out = Path(args.out)
        taken = [d for d in (out, out.with_name(out.name + "_adapter")) if d.exists()]
        if taken and not args.overwrite:
            raise ConfigError(f"--out {out}: {taken[0]} already exists: choose another --out or pass --overwrite")
        config = Path(args.config) if args.config else checkpoint.parent.parent / "job_config.yaml"
        if not config.exists():
            raise ConfigError(f"no training config at {config}: pass --config <the run's config-n<N>.yaml>")
        cfg = load_job_config(config)
        topo = Topology.from_env()
        device = start_process_group(topo)
        mc = replace(cfg.training_config.model_config, compile=False)  # one pass: nothing to compile for
        # A LoRA checkpoint holds the adapters only: the base is read from the model's files.
        model = build_sharded_model(mc, cfg.training_config.training_args.seed,
                                    init_device_mesh(device.type, (topo.world_size,)), device.type == "cuda",
                                    resuming=True, source=model_files(mc, topo))
        load_weights(checkpoint, model, checkpointed_weights(mc), fingerprint(cfg), topo.rank, topo.world_size)
        for path in export_hf(model, cfg, out, topo.rank == 0):
            if topo.rank == 0:
                print(f"wrote {path}", flush=True)
    except (ConfigError, CheckpointError) as e:
        return report(e)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
