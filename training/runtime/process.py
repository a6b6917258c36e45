"""What a worker process keeps while it lives: its arguments, the stop handler, the agent's progress
client, the tokenized data. Under the HyperPod agent's in-process restart one process serves every
size the job is resized to (training.worker), and each size's `Trainer` takes this from the last."""

from __future__ import annotations

import time

PROCESS_START = time.time()  # training.worker imports this before the trainer and torch: restart costs count from here

import argparse  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

from training.contract.errors import ConfigError  # noqa: E402
from training.runtime.agent import AgentProgress  # noqa: E402
from training.runtime.elastic import ElasticStop  # noqa: E402


def _writable_run_dir(path: Path, checkpoints: bool) -> Path:
    """The run directory, refused at start (not at the first save, hours later) unless it and, where
    the checkpoints go there (not to a bucket), its checkpoints/ can be written."""
    for where, key in ((path, "run.output_dir"), (path / "checkpoints", "run.output_dir/checkpoints"))[:1 + checkpoints]:
        try:
            where.mkdir(parents=True, exist_ok=True)
            probe = where / f".probe-{os.getpid()}"
            probe.touch()
            probe.unlink()
        except OSError as e:
            raise ConfigError(f"{key}={str(where)!r} is not writable ({e.strerror}): point run.output_dir "
                              f"(or --run-dir) at a writable directory, e.g. the shared checkpoint volume") from None
    return path


class Process:
    """What outlives a resize in place. The tokenized data is kept by what it was built from: a size
    whose config reads the same data with the same tokenizer reuses it."""

    def __init__(self, args: argparse.Namespace, stop: ElasticStop):
        self.args, self.stop = args, stop
        self.started = PROCESS_START  # when the current size's start began: process start, or the barrier's release
        self.agent: AgentProgress | None = None  # the agent's checkpoint discovery: one client per process
        self._data: dict[str, object] = {}
        self._writable: set[Path] = set()
        self.unsynced = None  # the last size's stop checkpoint, put on the disk after the next size's first step
        self.sizes = 0  # world sizes this process has started (more than one: resized in place)
        self.peer_server = None  # this node's server of peer copies (training.state.peer_server), in its first process

    def writable(self, run_dir: Path, checkpoints: bool = True) -> Path:
        """The run directory (with its checkpoints/, unless they go to a bucket), checked writable once
        per process (the probe's file operations would queue behind the background sync of the
        checkpoint a resize in place just saved)."""
        if run_dir not in self._writable:
            self._writable.add(_writable_run_dir(run_dir, checkpoints))
        return run_dir

    def data(self, built_from: tuple, build):
        key = repr(built_from)
        if key not in self._data:
            self._data = {key: build()}  # only the newest: an older size's data is not kept alive
        return self._data[key]
