"""training.launch: torchrun whose workers are forked from its agent once the agent has imported what
every worker imports, so that a local job's ranks pay the imports once between them; they train as
torchrun's own workers do, and anything it cannot fork is torchrun's as before."""

import subprocess
import sys

import pytest
from torch.distributed import run as torchrun

from conftest import ROOT, records, render_configs
from elastic_launcher.local.run import LocalJob
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
    """How many processes imported `module` (python -X importtime's lines, one per importing process)."""
    return sum(1 for line in stderr.splitlines() if line.startswith("import time:") and line.split("|")[-1].strip() == module)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_forked_workers_import_nothing_again_and_train_as_torchruns_own(tmp_path):
    """Two ranks forked from the warm agent and two started by torchrun train the same first step (the
    same loss, the same samples), but torchrun's import torch in each worker and in the agent, and
    transformers in each worker, while the forked ranks' agent imports both once for all."""
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=1")
    steps, imported = {}, {}
    for name, module in (("forked", "training.launch"), ("torchrun", "torch.distributed.run")):
        job = LocalJob(configs, tmp_path / name, nproc_per_node=1)
        command = [sys.executable, "-m", module, *job.command(2)[3:]]
        env = {**job.env(2), "PYTHONPROFILEIMPORTTIME": "1"}  # every process reports its imports
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        steps[name] = next(r for r in records(tmp_path / name) if r.get("step") == 1 and "loss" in r)
        imported[name] = imports_of(done.stderr, "torch"), imports_of(done.stderr, "transformers")
    assert steps["forked"]["loss"] == steps["torchrun"]["loss"]
    assert steps["forked"]["consumed_samples"] == steps["torchrun"]["consumed_samples"] == 8
    assert imported == {"forked": (1, 1), "torchrun": (3, 2)}
