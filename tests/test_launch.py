"""training.launch: torchrun whose workers are forked from its agent once the agent has imported what
every worker imports, so that a local job's ranks pay the imports once between them; they train as
torchrun's own workers do, and anything it cannot fork is torchrun's as before."""

import os
import signal
import subprocess
from pathlib import Path

import pytest
from torch.distributed import run as torchrun

from bench.worker_start import import_profile
from conftest import ROOT, records, render_configs, running, wait_for
from elastic_launcher.local.run import LocalJob, child_pids
from training import launch


@pytest.mark.parametrize(("argv", "forked"), [
    (["--standalone", "--nproc-per-node=2", "-m", "training", "--config-dir=c"], True),
    (["--nnodes=2", "--rdzv-endpoint=head:29400", "-m", "training", "--config-dir=c"], False),  # across nodes
    (["--standalone", "-m", "other_module"], False),
    (["--standalone", "train.py"], False),
])
def test_only_a_standalone_job_of_the_trainer_is_forked(argv, forked, monkeypatch):
    monkeypatch.setattr(launch, "cuda_device_visible", lambda: False)
    assert launch.forks(torchrun.parse_args(argv)) is forked


def test_on_a_machine_with_a_cuda_device_the_workers_start_as_torchruns_own(monkeypatch):
    monkeypatch.setattr(launch, "cuda_device_visible", lambda: True)
    assert not launch.forks(torchrun.parse_args(["--standalone", "-m", "training"]))


def imports_of(stderr: str, module: str) -> int:
    """How many processes imported `module` (python -X importtime reports it once per importing process)."""
    return sum(name.strip() == module for _, name in import_profile(stderr))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_forked_workers_import_nothing_again_and_train_as_torchruns_own(tmp_path):
    """Two ranks forked from the warm agent and two started by torchrun train the same first step (the
    same loss, the same samples), but torchrun's import torch in each worker and in the agent, and
    transformers in each worker, while the forked ranks' agent imports both once for all."""
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=1")
    steps, imported = {}, {}
    for name, module in (("forked", "training.launch"), ("torchrun", "torch.distributed.run")):
        job = LocalJob(configs, tmp_path / name, nproc_per_node=1, launcher=module)
        env = {**job.env(2), "PYTHONPROFILEIMPORTTIME": "1"}  # every process reports its imports
        done = subprocess.run(job.command(2), cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        steps[name] = next(r for r in records(tmp_path / name) if r.get("step") == 1 and "loss" in r)
        imported[name] = imports_of(done.stderr, "torch"), imports_of(done.stderr, "transformers")
    assert steps["forked"]["loss"] == steps["torchrun"]["loss"]
    assert steps["forked"]["consumed_samples"] == steps["torchrun"]["consumed_samples"] == 8
    assert imported == {"forked": (1, 1), "torchrun": (3, 2)}


def catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler of its own for `sig` (/proc's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(caught & (1 << (sig - 1)))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("moment", ["before-any-worker", "workers-training"])
def test_a_stop_to_the_launch_ends_it_and_its_workers_with_128_plus_the_signal(tmp_path, moment):
    """SIGTERM to the launch while its agent still imports (no worker yet): it ends at once, without
    waiting for the imports it would only waste. SIGTERM once its workers train: torchrun's agent
    passes it on (they checkpoint and exit), and the launch ends quietly, no traceback. Both 143."""
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=100000")
    job = LocalJob(configs, tmp_path / "run", nproc_per_node=1, launcher="training.launch")
    proc = subprocess.Popen(job.command(2), cwd=ROOT, env=job.env(2), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        if moment == "before-any-worker":
            assert wait_for(lambda: catches(proc.pid, signal.SIGTERM), timeout=30, interval=0.01)
            assert not child_pids(proc.pid)  # still importing: the warm-up takes seconds
        else:
            wait_for(lambda: any(r.get("step", 0) >= 2 and "loss" in r for r in records(tmp_path / "run")), timeout=180)
        workers = child_pids(proc.pid)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert not any(running(pid) for pid in workers)
    if moment == "workers-training":
        stop = [r for r in records(tmp_path / "run") if r.get("event") == "stop"]
        assert len(stop) == 1 and stop[0]["signal"] == "SIGTERM", stop
