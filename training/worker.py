"""A worker process's life, on top of the trainer: one world size, or under the HyperPod agent's
in-process restart (`training.runtime.in_place`) every size the job is resized to while the process
lives; what ends it and its exit code (`python -m training`: training/__main__.py)."""

from __future__ import annotations

import argparse
import gc
import os

from training.contract.errors import report, report_crash
from training.runtime.elastic import FAULT, ElasticStop
from training.runtime.in_place import AgentBarrier, in_place_requested
from training.runtime.process import Process  # torch-free, as those above: the process's start is timed before torch loads
from training.trainer import ONE_LINE_ERRORS, Trainer


def warm_up(config_dir: str) -> None:
    """What a fresh worker's first start imports (transformers' configuration and modeling modules
    for the job's model, pyarrow for the data cache the running job already wrote), imported while it
    waits for the operator: a pod added for a scale-up waits at the barrier before the resize reaches
    it, and these imports (4-7 s on CPU, measured) would otherwise be the resize's downtime. Best
    effort: what fails here, the start itself reports."""
    try:
        import pyarrow  # noqa: F401
        import torchdata.stateful_dataloader  # noqa: F401

        from training.contract.config import load_job_config
        from training.contract.config_files import BASE_CONFIG_FILE
        from training.model.causal_lm import import_model_code

        import_model_code(load_job_config(os.path.join(config_dir, BASE_CONFIG_FILE)).training_config.model_config)
    except Exception:  # noqa: BLE001
        pass


def main(args: argparse.Namespace, stop: ElasticStop | None = None) -> int:
    """One process: one world size, or under the agent's in-process restart every size the job is
    resized to while this process lives."""
    stop = stop or ElasticStop()
    process = Process(args, stop)
    try:
        stop.chain_agent_handler()
        barrier = AgentBarrier(stop) if in_place_requested() else None
    except Exception as e:  # noqa: BLE001 - e.g. the agent's socket refused: the agent restarts the process
        return report_crash(e, os.environ.get("RANK", "0"))
    while True:
        if barrier is not None:
            if process.sizes == 0:  # a new pod's worker imports its first start's code before the barrier
                warm_up(args.config_dir)
            # What lives for the process (imports, data) is never walked by the collector again: the
            # collection that frees a stopped size's model (close) then takes milliseconds, not 0.2 s.
            gc.freeze()
            process.started = barrier.wait_for_start()
        code, trainer = run_size(process)
        if barrier is None or trainer is None or code != 0 or stop.signal_name != FAULT:
            return code  # done, failed, or stopped by a signal (the pod goes): the process ends
        try:
            trainer.close()
        except Exception as e:  # noqa: BLE001 - the agent restarts this process, which resumes from the checkpoint
            return report_crash(e, os.environ.get("RANK", "0"))


def run_size(process: Process) -> tuple[int, Trainer | None]:
    """Train at the live world size until the job ends or stops: (exit code, the trainer if it stopped
    cleanly, whose process may go on to the next size)."""
    stop, trainer = process.stop, None
    try:
        trainer = Trainer(process)
        code = trainer.train()
        return code, trainer if trainer.stopped else None
    except ONE_LINE_ERRORS as e:
        if trainer is not None:
            trainer.log.close("FAILED")
        return report(e), None
    except Exception as e:
        stop.yield_to_stop()  # a peer's stop may be what broke this rank's collective
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        return report_crash(e, os.environ.get("RANK", "0")), None  # the job restarts from its checkpoint: the run goes on
    finally:
        if trainer is not None and hasattr(trainer, "method"):
            trainer.method.close()  # e.g. GRPO's reward process: none is left behind
