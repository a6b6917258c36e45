"""Per-step metrics on rank 0: <run_dir>/metrics.jsonl and stdout (the stream of training.contract.records),
the run's curves (<run_dir>/curves.png, redrawn at a checkpoint every REDRAW_S and at the end), optionally
TensorBoard and MLflow (training.tracking)."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import torch

from training.contract.config import LoggingConfig
from training.contract.errors import ConfigError
from training.contract.curves import CHART, REDRAW_S, draw
from training.contract.records import METRICS, SAMPLES, read_records

# Dense bf16 peak FLOP/s per device, for MFU (torchtitan's convention).
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "H800": 989e12, "B200": 2250e12, "A100": 312e12,
                   "A10G": 125e12, "L40S": 362e12, "L4": 121e12}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def peak_memory(device: torch.device) -> dict:
    """Peak memory since the last `reset_peak_memory` (the logging window): allocated by tensors and
    reserved by the caching allocator (what the GPU really gives up), in GiB. On CPU the process's
    peak RSS, which has no reset."""
    if device.type == "cuda":
        return {"peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30,
                "peak_reserved_gib": torch.cuda.max_memory_reserved(device) / 2**30}
    return {"peak_memory_gib": host_peak_bytes() / 2**30}


def host_peak_bytes() -> int:
    """The process's peak resident host memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


class MetricsLogger:
    @classmethod
    def from_config(cls, section: LoggingConfig, run_dir: Path, enabled: bool, config: dict,
                    launch_id: str) -> "MetricsLogger":
        """The run's logger from its `logging` section (MLflow through training.tracking when set)."""
        from training.tracking import Tracker

        tracker = Tracker(section.mlflow, run_dir, enabled, config, launch_id)
        return cls(run_dir, enabled, section.tensorboard, section.audit_samples, launch_id, tracker)

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool, audit_samples: bool, launch_id: str,
                 tracker=None):
        self.enabled, self.launch_id, self.tracker, self.run_dir = enabled, launch_id, tracker, run_dir
        self._chart, self._next_drawing = True, time.time() + REDRAW_S
        self._metrics = open(run_dir / METRICS, "a") if enabled else None
        self._samples = open(run_dir / SAMPLES, "a") if enabled and audit_samples else None
        self._tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError("training_config.logging.tensorboard=true but tensorboard is not installed: "
                                  "pip install tensorboard, or set it to false") from None
            self._tb = SummaryWriter(str(run_dir / "tensorboard"))

    def _write(self, record: dict) -> None:
        record = {"time": time.time(), "launch": self.launch_id, **record}
        line = json.dumps(record)
        self._metrics.write(line + "\n")
        self._metrics.flush()
        print(line, flush=True)  # the pod's log carries the stream too (training.contract.records)
        if self.tracker is not None:
            self.tracker.log(record)

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        self._write(record)
        if self._tb:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k != "step":
                    self._tb.add_scalar(k, v, record["step"])

    def samples(self, step: int, world_size: int, sample_ids: list[int], **extra) -> None:
        if self._samples:
            self._samples.write(json.dumps({"step": step, "world_size": world_size, "launch": self.launch_id,
                                            "sample_ids": sample_ids, **extra}) + "\n")
            self._samples.flush()

    def event(self, **fields) -> None:
        """Lifecycle events (start, resume, checkpoint, stop) in the same file, marked by `event`."""
        if self.enabled:
            self._write(fields)
            if fields.get("event") == "checkpoint" and time.time() >= self._next_drawing:
                self.draw_curves()

    def draw_curves(self) -> None:
        """The chart `action=status` names: drawn at a checkpoint (where the step already waits) at most
        every REDRAW_S, and at the end of the run; 0.2 s for 2,000 steps, plus matplotlib's import the
        first time. A chart that cannot be drawn is said once and never stops training."""
        self._next_drawing = time.time() + REDRAW_S
        if self.enabled and self._chart:
            try:
                draw(read_records(self.run_dir), self.run_dir / CHART)
            except Exception as e:  # noqa: BLE001 (an image without matplotlib, a full disk: the run goes on)
                print(f"warning: {CHART} not drawn ({type(e).__name__}: {e}); metrics.jsonl has every figure",
                      file=sys.stderr, flush=True)
                self._chart = False

    def close(self, status: str = "FINISHED") -> None:
        """Close the files; the tracker sets the run's `status` (FINISHED, KILLED after a stop, FAILED)."""
        if status == "FINISHED":
            self.draw_curves()
        if self.tracker is not None:
            self.tracker.close(status)
        for f in (self._metrics, self._samples):
            if f:
                f.close()
        if self._tb:
            self._tb.close()
