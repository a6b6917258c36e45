"""A Hugging Face model directory from the sharded training model: what a serving stack loads.

Written at the last step when `training_args.save_hf_ckpt` is set, or from any complete checkpoint:

    python -m training.export --checkpoint RUN_DIR/checkpoints/step-N --out DIR [--config FILE]
    torchrun --nproc-per-node=8 -m training.export ...   # a model too large for one process

(the command line: training/export/__main__.py).

Parameters are gathered one at a time (each gather a collective on every rank) and rank 0 writes
them into safetensors shards of at most 5 GB, so no rank ever holds more than its own shards, one
gathered tensor and one output shard. For LoRA, `<out>` holds the merged model (W + scaling * B @ A,
with `merge_weights`) and `<out>_adapter` the adapter alone, loadable with peft.PeftModel. Both are
written to a temporary directory first and renamed when complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

import torch

from training.contract import buckets
from training.contract.config import JobConfig
from training.model.lora import adapter_config, adapter_tensors
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


def export_hf(model, cfg: JobConfig, out: Path, rank0: bool, tokenizer_from: str | None = None) -> list[Path]:
    """Write the Hugging Face directories of the trained model (in the dtype it computed in); returns
    the directories written. The tokenizer is read from `tokenizer_from` (the model's local files,
    where the model came from a bucket), else as the config names it."""
    from transformers import AutoTokenizer

    mc, ta = cfg.training_config.model_config, cfg.training_config.training_args
    dtype = torch.bfloat16 if mc.mixed_precision == "bf16" else torch.float32
    lora = mc.lora

    def model_files(directory: Path) -> None:
        write_model_config(model, directory, dtype)
        AutoTokenizer.from_pretrained(mc.tokenizer_name_or_path or tokenizer_from or mc.model_name_or_path
                                      ).save_pretrained(directory)

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


def export_run(model, cfg: JobConfig, run_dir: Path, rank0: bool, tokenizer_from: str | None) -> list[str]:
    """A run's export at its end: <run_dir>/hf (LoRA: and hf_adapter), also put beside the checkpoints
    where they are in S3 (<checkpoint.uri>/hf); returns where the export is."""
    written = [str(d) for d in export_hf(model, cfg, run_dir / "hf", rank0, tokenizer_from)]
    uri = cfg.training_config.checkpoint.uri
    if not buckets.is_s3(uri):
        return written
    uploaded = [f"{uri.rstrip('/')}/{Path(d).name}" for d in written]
    if rank0:
        for local, remote in zip(written, uploaded):
            buckets.upload(buckets.CHECKPOINT_URI_KEY, Path(local), remote)
    return uploaded
