"""A worker's start imports only what its run uses: every (re)start of every process pays for each
import, on a cluster's restarts and at each of the suite's launches (bench/worker_start.py times it)."""

import subprocess
import sys

from bench.worker_start import NOT_AT_START, forbidden, import_profile
from conftest import ROOT, records, render_configs


def start_worker(configs, run_dir) -> set[str]:
    """One start of the tiny SFT twin at one node (a world of one), stopped after its first step (the
    end of a whole run draws its chart with matplotlib): the modules it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "training", "--config-dir", str(configs),
                           "--run-dir", str(run_dir), "--stop-at-step", "1"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name.strip() for _, name in import_profile(done.stderr)}


def test_a_start_on_cached_data_imports_no_data_library_nor_any_other_the_run_does_not_use(tmp_path):
    """The first start tokenizes with `datasets` (and proves the check sees what a start imports); a
    restart reads the cache with pyarrow and imports nothing of NOT_AT_START: not datasets, pandas,
    the launcher, tracking, RL, S3 or inductor's compiler."""
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=2")
    first = start_worker(configs, tmp_path / "run")
    assert {"datasets", "pandas", "torch", "transformers"} <= first
    (tmp_path / "run" / "checkpoints").rename(tmp_path / "first-checkpoints")  # start again from step 0

    restart = start_worker(configs, tmp_path / "run")
    assert forbidden(restart) == [], f"a start on cached data imported {forbidden(restart)} (NOT_AT_START: {NOT_AT_START})"
    assert "pyarrow" in restart
    steps = [r for r in records(tmp_path / "run") if r.get("step") == 1 and "loss" in r]
    assert len(steps) == 2 and steps[0]["loss"] == steps[1]["loss"]  # the cache holds the rows the first start trained on
