"""What a user sees from the launcher's local actions and overrides: command-line values hold at
every size, local runs work from any directory, relay a trainer error as one line, stop
gracefully on SIGTERM with nothing left behind, and a resize adopts the new size's learning rate."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from conftest import MAIN_COMMAND, ROOT, interruptible, losses, records, render_configs, train, wait_for
from elastic_launcher.local.run import child_pids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TINY = ["recipes=llama/tiny_llama_sft"]


def test_a_typed_override_holds_at_every_size_unless_an_entry_is_typed_too(launch, tmp_path):
    code, out, _ = launch(*MAIN_COMMAND, "recipes.training_config.training_args.micro_train_batch_size=1",
                          "recipes.scale_config.n4.training_config.training_args.micro_train_batch_size=2")
    assert code == 0
    configs = tmp_path / "out" / "llama3-1-8b-sft" / "configs"
    micro = {n: yaml.safe_load((configs / f"config-n{n}.yaml").read_text())["training_config"]["training_args"]
             ["micro_train_batch_size"] for n in (2, 3, 4, 6, 8)}
    assert micro == {2: 1, 3: 1, 4: 2, 6: 1, 8: 1}
    assert "note: recipes.training_config.training_args.micro_train_batch_size from the command line replaces" in out


def test_dry_run_local_run_and_rehearsal_plan_the_same_micro_batches(launch, tmp_path, monkeypatch):
    """One command line, one plan: a micro-batch typed on the command line holds at every size in
    the dry run's configs, the local run's and the rehearsal's (stopped as they launch torchrun)."""
    from elastic_launcher.local.run import LocalJob

    class Launched(Exception):
        pass

    def launched(*args, **kwargs):
        raise Launched

    monkeypatch.setattr(LocalJob, "start", launched)
    command = ["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true",
               "recipes.training_config.training_args.micro_train_batch_size=1"]
    assert launch(*command)[0] == 0
    with pytest.raises(Launched):
        launch(*command, "action=local", f"local.run_dir={tmp_path / 'local'}")
    with pytest.raises(Launched):
        launch(*command, "action=rehearse", f"local.run_dir={tmp_path / 'rehearsal'}", "local.trace=[{step:0,nodes:2}]")

    def micro(configs):
        return {f.name: yaml.safe_load(f.read_text())["training_config"]["training_args"]["micro_train_batch_size"]
                for f in sorted(configs.glob("config-n*.yaml"))}

    dry = micro(tmp_path / "out" / "tiny-llama-sft" / "configs")
    assert dry == {"config-n1.yaml": 1, "config-n2.yaml": 1, "config-n3.yaml": 1}
    assert micro(tmp_path / "local" / "launch" / "configs") == dry
    assert micro(tmp_path / "rehearsal" / "launch" / "configs") == dry


def launcher(*args, cwd, timeout=120):
    return subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=interruptible)


def test_local_run_from_another_directory_with_a_closing_line(tmp_path):
    proc = launcher(*TINY, "action=local", "recipes.training_config.training_args.max_steps=3",
                    f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}", cwd=tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert re.search(rf"^step 2/3  \d:\d\d, ~\d:\d\d left  loss \d\.\d{{4}}$", out, re.MULTILINE), out
    assert re.search(rf"^done: 3 steps in \d:\d\d; loss [\d.]+ over the first 1 steps, [\d.]+ over the last 1; in "
                     rf"{re.escape(str(tmp_path / 'run'))}: metrics.jsonl, curves.png$", out, re.MULTILINE), out
    assert (tmp_path / "run" / "launch" / "configs" / "config-n2.yaml").exists()  # its own copy of the configs
    assert sorted(losses(tmp_path / "run")) == [1, 2, 3]
    assert [r["step"] for r in records(tmp_path / "run") if r.get("event") == "checkpoint"] == [3]
    # Run again: it resumes at the end and says there was nothing left to train.
    again = launcher(*TINY, "action=local", "recipes.training_config.training_args.max_steps=3",
                     f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}", cwd=tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert f"nothing to train: the run in {tmp_path / 'run'} had already reached step 3 of 3" in out
    # A longer schedule on resume moves the LR: said once, with the numbers.
    longer = launcher(*TINY, "action=local", "recipes.training_config.training_args.max_steps=5",
                      f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}", cwd=tmp_path)
    out, err = longer.communicate(timeout=300)
    assert longer.returncode == 0, err
    assert "training_args max_steps 3 -> 5 since the checkpoint at step 3: the warmup/cosine schedule is recomputed, " \
           "so the LR at step 3 moves from" in out + err
    assert sorted(losses(tmp_path / "run")) == [1, 2, 3, 4, 5]


def test_local_run_with_a_missing_dataset_is_one_line_within_seconds(tmp_path):
    start = time.monotonic()
    proc = launcher(*TINY, "action=local", "recipes.training_config.datasets.train_data=data/nope.jsonl",
                    f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}", cwd=ROOT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "train_data='data/nope.jsonl' does not exist" in lines[0], err
    assert time.monotonic() - start < 45


def training_until_stopped(tmp_path, run_dir):
    """A local run of the tiny recipe with no end in sight, once it has trained two steps."""
    proc = launcher(*TINY, "action=local", "recipes.training_config.training_args.max_steps=100000",
                    "recipes.training_config.checkpoint.save_steps=100000", f"local.run_dir={run_dir}",
                    f"output_dir={tmp_path / 'out'}", cwd=ROOT)
    try:
        wait_for(lambda: any(r.get("step", 0) >= 2 and "loss" in r for r in records(run_dir)), timeout=180)
    except BaseException:
        proc.kill()
        raise
    return proc


def test_a_trainer_crash_in_a_local_run_is_one_line_with_where_it_was_raised(tmp_path):
    """An error that is no configuration mistake (here transformers refusing the model's shape) reaches
    the user as one line: the exception, the file and line that raised it, the rank and the log's
    path; the tracebacks of both ranks stay in the log."""
    proc = launcher(*TINY, "action=local", "recipes.training_config.model_config.architecture.num_attention_heads=5",
                    f"local.run_dir={tmp_path / 'run'}", f"output_dir={tmp_path / 'out'}", cwd=ROOT)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert re.fullmatch(r"error: ValueError: The hidden size \(64\) is not a multiple of the number of attention heads "
                        r"\(5\)\. \(rank [01], .*configuration_llama\.py:\d+\) \(full log: .*torchrun\.log\)", lines[0])
    log = (tmp_path / "run" / "torchrun.log").read_text()
    assert log.count("Traceback (most recent call last)") >= 2 and "Traceback" not in out


def test_ctrl_c_pressed_again_waits_for_the_checkpoint_and_says_so(tmp_path):
    """Ctrl-C, then three more while the workers save: the launcher stays until its whole process tree
    has exited, says why, and the stop's checkpoint is complete."""
    run_dir = tmp_path / "run"
    proc = training_until_stopped(tmp_path, run_dir)
    try:
        torchrun = child_pids(proc.pid)
        tree = torchrun + [w for t in torchrun for w in child_pids(t)]
        proc.send_signal(signal.SIGINT)
        for _ in range(3):
            time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "still stopping: the workers are saving a checkpoint" in err and "Traceback" not in err
    assert not any(os.path.exists(f"/proc/{pid}") for pid in tree)
    stop = [r for r in records(run_dir) if r.get("event") == "stop"]
    assert len(stop) == 1 and f"stopped: checkpoint at step {stop[0]['step']}" in out


def test_sigterm_to_a_local_run_checkpoints_and_leaves_no_process(tmp_path):
    run_dir = tmp_path / "run"
    proc = training_until_stopped(tmp_path, run_dir)
    try:
        torchrun = child_pids(proc.pid)
        workers = [w for t in torchrun for w in child_pids(t)]
        assert len(workers) == 2
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    stop = [r for r in records(run_dir) if r.get("event") == "stop"]
    assert len(stop) == 1 and f"checkpoint at step {stop[0]['step']}" in out and "rerun the same command" in out
    assert not any(os.path.exists(f"/proc/{pid}") for pid in torchrun + workers)


def test_ctrl_c_with_the_output_piped_still_stops_gracefully(tmp_path):
    """`python launcher.py ... action=local | grep -v '^step='` and Ctrl-C: the terminal's SIGINT ends
    the reader too, so the launcher's stdout breaks mid-stop. The workers still checkpoint (their
    stop event says SIGINT), and the closing line reaches the user on stderr."""
    run_dir = tmp_path / "run"
    reader = subprocess.Popen(["grep", "-v", "^step="], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              preexec_fn=interruptible)
    proc = subprocess.Popen([sys.executable, str(ROOT / "launcher.py"), *TINY, "action=local",
                             "recipes.training_config.training_args.max_steps=100000",
                             "recipes.training_config.checkpoint.save_steps=100000", f"local.run_dir={run_dir}",
                             f"output_dir={tmp_path / 'out'}"], cwd=ROOT, stdout=reader.stdin, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=interruptible)
    reader.stdin.close()
    try:
        wait_for(lambda: any(r.get("step", 0) >= 2 and "loss" in r for r in records(run_dir)), timeout=180)
        reader.send_signal(signal.SIGINT)  # Ctrl-C reaches the whole pipeline
        reader.wait(timeout=10)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        for p in (proc, reader):
            if p.poll() is None:
                p.kill()
    assert proc.returncode == 130, err
    stop = [r for r in records(run_dir) if r.get("event") == "stop"]
    assert len(stop) == 1 and stop[0]["signal"] == "SIGINT"
    assert f"stopped: checkpoint at step {stop[0]['step']}" in err and "Traceback" not in err


def test_a_resize_adopts_the_new_sizes_learning_rate(tmp_path):
    """2 nodes at LR 3e-3, resumed at 1 node whose entry says 1e-3: from the resume on, the run must
    equal one that trained at 1e-3 from the same checkpoint."""
    common = ["recipes.training_config.training_args.max_steps=6", "recipes.training_config.checkpoint.save_steps=3",
              "recipes.training_config.training_args.warmup_steps=0"]
    mixed = render_configs(tmp_path / "mixed", *common,
                           "+recipes.scale_config.n1.training_config.training_args.learning_rate=1e-3")
    uniform = render_configs(tmp_path / "uniform", *common, "recipes.training_config.training_args.learning_rate=1e-3")
    train(mixed, tmp_path / "resized", nodes=2, stop_at_step=3)
    shutil.copytree(tmp_path / "resized" / "checkpoints", tmp_path / "reference" / "checkpoints")
    train(mixed, tmp_path / "resized", nodes=1)
    train(uniform, tmp_path / "reference", nodes=1)
    lr = {r["step"]: r["lr"] for r in records(tmp_path / "resized") if "loss" in r}
    reference_lr = {r["step"]: r["lr"] for r in records(tmp_path / "reference") if "loss" in r}
    assert lr[3] > 2e-3 and all(lr[s] == pytest.approx(reference_lr[s]) for s in (4, 5, 6))
    got, want = losses(tmp_path / "resized"), losses(tmp_path / "reference")
    for step in (4, 5, 6):
        assert got[step] == pytest.approx(want[step], rel=1e-6)


def test_hsdp_over_two_local_nodes_matches_fsdp(tmp_path):
    from elastic_launcher.local.run import LocalJob

    common = ["recipes.training_config.training_args.max_steps=4", "recipes.elastic_policy.max_nodes=4"]
    fsdp = render_configs(tmp_path / "fsdp", *common)
    hsdp = render_configs(tmp_path / "hsdp", *common, "recipes.training_config.model_config.sharding=hsdp")
    for name, configs in (("fsdp", fsdp), ("hsdp", hsdp)):
        proc = LocalJob(configs, tmp_path / name / "run", nproc_per_node=2).start(
            2, log=open(tmp_path / f"{name}.log", "wb"))
        assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]
    a, b = losses(tmp_path / "fsdp" / "run"), losses(tmp_path / "hsdp" / "run")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert a[step] == pytest.approx(b[step], rel=1e-5)


FAKE_TORCHRUN = """
import signal, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGUSR1, lambda *a: "
                           "exit(0)); print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
worker.stdout.readline()
print('ready', flush=True)
worker.wait()
time.sleep(float(sys.argv[1]))  # a launcher tearing itself down after its workers are gone
"""


@pytest.mark.timeout(60)
def test_a_resize_stop_ends_when_the_workers_exit_and_the_launcher_is_reaped_later():
    """A rehearsal's stop waits for the workers (what holds the node), not for torchrun's own teardown,
    which the HyperPod agent never does between a stop and the next start; torchrun is still reaped."""
    from elastic_launcher.local.run import stop_workers

    proc = subprocess.Popen([sys.executable, "-c", FAKE_TORCHRUN, "3"], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"ready\n"
    assert stop_workers(proc, grace=30, sig=signal.SIGUSR1) is True
    assert child_pids(proc.pid, running=True) == [] and proc.poll() is None  # the launcher is still tearing down
    wait_for(lambda: proc.poll() is not None, timeout=30, interval=0.1)  # reaped in the background
    assert proc.returncode == 0
