"""`python -m training.export`: a Hugging Face model directory from one complete checkpoint, under
torchrun or as a single process (the library: training.export)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from torch.distributed.device_mesh import init_device_mesh

from training import export
from training.contract import buckets
from training.contract.checkpoint_dirs import COMPLETE, complete_checkpoints, step_name
from training.contract.config import load_job_config
from training.contract.errors import ConfigError, report
from training.model.causal_lm import build_sharded_model
from training.model.lora import checkpointed_weights
from training.runtime.snapshot import model_files
from training.runtime.topology import Topology, start_process_group
from training.state.checkpoint import CheckpointError, fingerprint, load_weights


def main(argv=None) -> int:
    """Export one complete checkpoint (under torchrun or as a single process)."""
    parser = argparse.ArgumentParser(prog="python -m training.export", description=export.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True,
                        help="a complete checkpoint: a directory (.../checkpoints/step-N) or its S3 uri "
                             "(s3://bucket/prefix/step-N, with --config)")
    parser.add_argument("--out", required=True, help="the Hugging Face directory to write")
    parser.add_argument("--config", help="the run's training config (default: job_config.yaml in the run directory)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")
    args = parser.parse_args(argv)
    try:
        checkpoint = args.checkpoint.rstrip("/")
        if buckets.is_s3(checkpoint):
            check_bucket_checkpoint(checkpoint, args.config)
        else:
            check_volume_checkpoint(Path(checkpoint))
        out = Path(args.out)
        taken = [d for d in (out, out.with_name(out.name + "_adapter")) if d.exists()]
        if taken and not args.overwrite:
            raise ConfigError(f"--out {out}: {taken[0]} already exists: choose another --out or pass --overwrite")
        config = Path(args.config) if args.config else Path(checkpoint).parent.parent / "job_config.yaml"
        if not config.exists():
            raise ConfigError(f"no training config at {config}: pass --config <the run's config-n<N>.yaml>")
        cfg = load_job_config(config)
        topo = Topology.from_env()
        device = start_process_group(topo)
        mc = replace(cfg.training_config.model_config, compile=False)  # one pass: nothing to compile for
        # A LoRA checkpoint holds the adapters only: the base is read from the model's files.
        source = model_files(mc, topo)
        model = build_sharded_model(mc, cfg.training_config.training_args.seed,
                                    init_device_mesh(device.type, (topo.world_size,)), device.type == "cuda",
                                    resuming=True, source=source)
        load_weights(checkpoint, model, checkpointed_weights(mc), fingerprint(cfg), topo.rank, topo.world_size)
        for path in export.export_hf(model, cfg, out, topo.rank == 0, source):
            if topo.rank == 0:
                print(f"wrote {path}", flush=True)
    except (ConfigError, CheckpointError) as e:
        return report(e)
    return 0


def check_volume_checkpoint(checkpoint: Path) -> None:
    if not checkpoint.is_dir():
        found = [p.name for p in complete_checkpoints(checkpoint.parent)]
        raise ConfigError(f"--checkpoint {checkpoint} does not exist: "
                          + (f"complete checkpoints in {checkpoint.parent}: {', '.join(found)}" if found else
                             "give a step-<8 digits> directory under <run dir>/checkpoints, e.g. step-00000020"))
    if not (checkpoint / COMPLETE).exists():
        raise ConfigError(f"--checkpoint {checkpoint} is not a complete checkpoint (no {COMPLETE} marker): "
                          f"its save was cut short; export the previous step-N directory")


def check_bucket_checkpoint(uri: str, config: str | None) -> None:
    """A complete checkpoint under an S3 prefix; the run's config given (the bucket holds none)."""
    prefix, _, name = uri.rpartition("/")
    complete = buckets.checkpoint_steps("--checkpoint", prefix)
    if not (name[5:].isdigit() and name.startswith("step-") and int(name[5:]) in complete):
        found = ", ".join(step_name(s) for s in complete)
        raise ConfigError(f"--checkpoint {uri} is not a complete checkpoint: "
                          + (f"complete checkpoints under {prefix}: {found}" if found else
                             f"no complete checkpoint is under {prefix}"))
    if config is None:
        raise ConfigError(f"--checkpoint {uri} is in S3, which holds no training config: pass --config <the run's "
                          f"job_config.yaml or config-n<N>.yaml>")


if __name__ == "__main__":
    raise SystemExit(main())
