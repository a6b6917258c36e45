"""The trainer as a process (`python -m training`, a world of one, or torchrun): start-up errors are
one line within seconds, a signal during start-up exits 0 at once, an orphaned worker dies, a
non-finite loss stops the run before it reaches the weights or a checkpoint, bad data names its row."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, losses, render_configs, running
from training.contract.checkpoint_dirs import complete_checkpoints

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def trainer(config_dir, run_dir, *extra, env=None):
    return subprocess.Popen([sys.executable, "-m", "training", f"--config-dir={config_dir}", f"--run-dir={run_dir}",
                             *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return render_configs(tmp_path_factory.mktemp("configs"), "recipes.training_config.training_args.max_steps=4")


def one_line_error(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_missing_config_dir_is_one_line():
    start = time.monotonic()
    line = one_line_error(trainer("/nope", "/tmp/unused-run"))
    assert "config dir '/nope'" in line and time.monotonic() - start < 30


def test_missing_data_path_is_one_line_within_seconds(configs, tmp_path):
    cfg = configs / "config-n1.yaml"
    cfg.with_name("config.yaml")
    other = tmp_path / "cfg"
    other.mkdir()
    text = cfg.read_text().replace("train_data: data/sft_tiny.jsonl", "train_data: data/nope.jsonl")
    (other / "config.yaml").write_text(text)
    start = time.monotonic()
    line = one_line_error(trainer(other, tmp_path / "run"))
    assert "train_data='data/nope.jsonl' does not exist" in line and time.monotonic() - start < 30


def test_evaluation_without_validation_rows_is_one_line(tmp_path):
    """A split ratio so close to 1 that it holds out no row of the 512: refused before training."""
    configs = render_configs(tmp_path / "configs", "recipes.training_config.datasets.train_val_split_ratio=0.9999",
                             "recipes.training_config.training_args.eval_steps=2")
    line = one_line_error(trainer(configs, tmp_path / "run"))
    assert "eval_steps=2 but no validation rows are left (datasets.train_val_split_ratio=0.9999 of 512 rows, and " \
           "train_data has no validation or test split)" in line


def test_unwritable_output_dir_is_one_line(configs, tmp_path):
    line = one_line_error(trainer(configs, "/proc/nope"))
    assert "run.output_dir='/proc/nope' is not writable" in line
    # A writable run directory whose checkpoints/ is not (here a read-only place) is refused at start too.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoints").symlink_to("/proc/self")
    line = one_line_error(trainer(configs, tmp_path / "run"))
    assert f"run.output_dir/checkpoints='{tmp_path / 'run' / 'checkpoints'}' is not writable" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # refused before a step was trained


def test_a_signal_during_start_up_exits_zero_at_once(configs, tmp_path):
    proc = trainer(configs, tmp_path / "run")
    time.sleep(0.5)  # still importing torch
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert not (tmp_path / "run" / "checkpoints").exists()


PEER_LEAVES_IN_START_UP = """
import os, sys
os.environ["WORLD_SIZE"] = "2"
from training.runtime.elastic import STOP_KEY, STOPPED_KEY, ElasticStop
stop = ElasticStop()
from torch.distributed import TCPStore
import training.worker as worker

store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)

def start_up(process):
    stop.attach_store(store, rank=1, world_size=2)  # the process group exists
    if sys.argv[1] == "announced":  # rank 0 heard SIGUSR1, announced the stop and left at once
        peer = TCPStore("127.0.0.1", store.port, is_master=False)
        peer.set(STOP_KEY, "SIGUSR1")
        peer.add(STOPPED_KEY, 1)
    raise RuntimeError("Connection closed by peer")  # the collective with rank 0, a moment later

worker.Trainer = start_up
sys.exit(worker.main(None, stop))
"""


@pytest.mark.parametrize("peer", ["announced", "silent"])
def test_a_start_up_collective_broken_by_a_peers_stop_ends_as_a_stop(peer):
    """A peer that stops during start-up leaves at once; this rank's collective with it may fail
    before the watcher sees the announcement. That failure ends the rank as a stop (exit 0): the
    operator reads a non-zero exit as a fault. The same failure with no stop announced stays a failure."""
    done = subprocess.run([sys.executable, "-c", PEER_LEAVES_IN_START_UP, peer], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if peer == "announced":
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    else:
        assert done.returncode == 1 and "RuntimeError: Connection closed by peer" in done.stderr


def test_a_worker_whose_parent_dies_during_start_up_goes_too(configs, tmp_path):
    pid_file = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", f"""
import subprocess, sys, time
p = subprocess.Popen([sys.executable, "-m", "training", "--config-dir={configs}", "--run-dir={tmp_path / 'run'}"],
                     cwd={str(ROOT)!r})
open({str(pid_file)!r}, "w").write(str(p.pid))
time.sleep(60)
"""])
    while not pid_file.exists() or not pid_file.read_text():
        time.sleep(0.05)
    time.sleep(0.3)
    parent.kill()
    parent.wait()
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and running(child):
        time.sleep(0.1)
    assert not running(child)


def test_non_finite_loss_stops_before_the_update_and_keeps_the_last_good_checkpoint(tmp_path):
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=10",
                             "recipes.training_config.training_args.learning_rate=1e30",
                             "recipes.training_config.training_args.min_learning_rate=0",
                             "recipes.training_config.training_args.warmup_steps=0",
                             "recipes.training_config.checkpoint.save_steps=1")
    line = one_line_error(trainer(configs, tmp_path / "run"), timeout=120)
    assert "non-finite loss or gradient norm at step" in line and "max_skipped_steps" in line
    bad_step = int(line.split("at step ")[1].split()[0])
    saved = [int(p.name.split("-")[1]) for p in complete_checkpoints(tmp_path / "run" / "checkpoints")]
    assert saved and max(saved) == bad_step - 1  # the last good step, nothing after it
    assert all(v == v for v in losses(tmp_path / "run").values())  # no NaN ever logged


def test_bad_rows_are_named_and_dropped_rows_counted(tmp_path):
    from training.contract.config import DatasetConfig
    from training.contract.errors import ConfigError
    from training.data import build_dataset

    from conftest import tiny_tokenizer

    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    no_answer = {"messages": [{"role": "user", "content": "hi"}]}
    bad = {"messages": [{"role": "assistant", "content": "I start"}, {"role": "user", "content": "hi"}]}
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in (good, no_answer, good, bad)) + "\n")
    with pytest.raises(ConfigError, match=rf"bad training row at {data} line 4: the conversation starts with an "
                                          r"assistant turn.*fix or remove the row"):
        build_dataset(DatasetConfig(train_data=str(data)), tiny_tokenizer())
    data.write_text("\n".join(json.dumps(r) for r in (good, no_answer, good)) + "\n")
    ds, _, stats = build_dataset(DatasetConfig(train_data=str(data)), tiny_tokenizer())
    assert len(ds) == 2 and stats["dropped"] == {"no_assistant_tokens": 1}
    data.write_text(json.dumps(no_answer) + "\n")
    with pytest.raises(ConfigError, match=r"all 1 rows were dropped \(1 with no assistant tokens\)"):
        build_dataset(DatasetConfig(train_data=str(data)), tiny_tokenizer())
    data.write_text("")
    with pytest.raises(ConfigError, match="is empty: it holds no rows"):
        build_dataset(DatasetConfig(train_data=str(data)), tiny_tokenizer())
    # Rows the JSON reader itself chokes on are found and named too, not left to a reader traceback.
    data.write_bytes(json.dumps(good).encode() + b"\n" + json.dumps(good).encode()[:-2] + b"\xff\"}\n")
    with pytest.raises(ConfigError, match=rf"bad training row at {data} line 2: invalid UTF-8 \(byte 0xff"):
        build_dataset(DatasetConfig(train_data=str(data)), tiny_tokenizer())
    data.write_text(json.dumps(good) + "\n" + '{"messages": [\n')
    with pytest.raises(ConfigError, match=rf"bad training row at {data} line 2: invalid JSON"):
        build_dataset(DatasetConfig(train_data=str(data)), tiny_tokenizer())


def test_a_missing_local_path_is_never_taken_for_a_hub_id(tmp_path, monkeypatch):
    """`data/sft_tiny` (no extension, ./data exists) is a mistyped local path: one line at once,
    with the near match, and no hub round trip."""
    from training.contract.config import DatasetConfig
    from training.contract.errors import ConfigError
    from training.data import _data_files

    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError, match=r"train_data='data/sft_tiny' does not exist \(did you mean "
                                          r"'data/sft_tiny.jsonl'\?\)"):
        _data_files(DatasetConfig(train_data="data/sft_tiny"))
    assert _data_files(DatasetConfig(train_data="HuggingFaceH4/ultrachat_200k")) is None  # a hub id stays one


def test_when_every_checkpoint_is_corrupt_training_starts_afresh_from_initial_weights(configs, tmp_path):
    from training.contract.checkpoint_dirs import CORRUPT_SUFFIX, step_dir

    run_dir = tmp_path / "run"
    first = trainer(configs, run_dir)
    assert first.wait(timeout=180) == 0, first.stderr.read()
    first_losses = losses(run_dir)
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-00000004"]  # the only checkpoint
    shard = max((step_dir(run_dir / "checkpoints", 4)).glob("*.distcp"), key=lambda f: f.stat().st_size)
    shard.write_bytes(shard.read_bytes()[:-100])
    second = trainer(configs, run_dir)
    _, err = second.communicate(timeout=180)
    assert second.returncode == 0, err
    assert "step-00000004" in err and "trying the previous one" in err
    assert (run_dir / "checkpoints" / f"step-00000004{CORRUPT_SUFFIX}").is_dir()
    assert losses(run_dir) == pytest.approx(first_losses, rel=1e-6)  # the same run again, not garbage weights


HOST_READS = """
import json, os, sys, warnings
warnings.filterwarnings("ignore")
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from training.runtime.elastic import ElasticStop
from training.runtime.arguments import parse_args
from training.runtime.process import Process
from training.trainer import Trainer

# What reads a device value on the host (a GPU sync): .item(), bool(), torch.equal, .tolist().
READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.equal.default, torch.ops.aten.is_nonzero.default}
COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default}


# A tensor made from Python numbers (on a GPU, a copy from pageable memory that waits for the
# stream), or a copy from unpinned host memory to another device.
def pageable_host_to_device(func, args, kwargs):
    if func is torch.ops.aten.lift_fresh.default:
        return True
    if func in COPIES:
        source, target = (args[1], args[0]) if func is torch.ops.aten.copy_.default else (args[0], kwargs.get("device"))
        target = getattr(target, "device", target)
        return source.device.type == "cpu" and target is not None and torch.device(target).type != "cpu" \
            and not source.is_pinned()
    return False


class HostReads(TorchDispatchMode):
    count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        HostReads.count += func in READS or pageable_host_to_device(func, args, kwargs or {})
        return func(*args, **(kwargs or {}))


tolist = torch.Tensor.tolist
def counted_tolist(self):
    HostReads.count += 1
    return tolist(self)
torch.Tensor.tolist = counted_tolist

import dataclasses
import training.trainer as train_module
loaded, load = [], train_module.load_job_config
train_module.load_job_config = lambda path: loaded.append((path, load(path))) or loaded[-1][1]
trainer = Trainer(Process(parse_args(["--config-dir", sys.argv[1], "--run-dir", sys.argv[2]]), ElasticStop()))
trainer.model.lm_head.fused = True  # the GPU's loss (gradients in forward), on the CPU
# Start-up resolved the config as run (vocabulary, schedule) into a new object: the loaded one is as read.
(path, config), = loaded
config_unchanged = dataclasses.asdict(config) == dataclasses.asdict(load(path))
before_update = []
hook = trainer.optimizer.register_step_pre_hook(lambda *args: before_update.append(HostReads.count))
loader, steps = trainer._loader(), lambda: [next(loader) for _ in range(trainer.plan.grad_accum_steps)]
trainer.model.train()
for _ in range(3):
    micro_batches = steps()  # collated on the host (by the loader's workers in a real run)
    HostReads.count = 0
    with HostReads():
        trainer.train_step(micro_batches)
hook.remove()

# A step whose gradient is not finite changes neither the weights nor the optimizer's state.
trained = [p for p in trainer.model.parameters() if p.requires_grad]
full = lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t  # the step count is a plain tensor
snapshot = lambda: [full(t).clone() for p in trained for t in (p, *trainer.optimizer.state[p].values())]
before = snapshot()
forward_backward = trainer.method.forward_backward
def poisoned(*args, **kwargs):
    result = forward_backward(*args, **kwargs)
    trained[0].grad.fill_(float("nan"))
    return result
trainer.method.forward_backward = poisoned
record, *_ = trainer.train_step(steps())
trainer.method.forward_backward = forward_backward
unchanged = all(torch.equal(a, b) for a, b in zip(before, snapshot()))
record, *_ = trainer.train_step(steps())
moved = not all(torch.equal(a, b) for a, b in zip(before, snapshot()))
print(json.dumps({"before_update": before_update, "skipped_unchanged": unchanged, "next_moves": moved,
                  "skipped_steps": trainer.state.skipped_steps, "config_unchanged": config_unchanged}), flush=True)
# Ended as `python -m training` ends: the interpreter's teardown of a live process group is not a
# worker's (a gloo thread destroyed while joinable aborts it: "terminate called without an active exception").
os._exit(0)
"""


@pytest.mark.parametrize("recipe, overrides", [
    ("llama/tiny_llama_sft", ["recipes.training_config.datasets.packing=true"]),
    ("llama/tiny_llama_dpo", []),
], ids=["sft-packed", "lora-dpo"])
def test_a_step_reads_nothing_from_the_device_before_the_update_and_skips_a_non_finite_one(tmp_path, recipe,
                                                                                          overrides):
    """Nothing in a step waits for the device before the optimizer step is queued (no .item(),
    bool(), torch.equal or .tolist(), and no tensor made from host numbers: packed attention masks
    come from host-side document ids, token counts and flags are staged in pinned memory, the fused
    loss scales its gradients on the device, the non-finite verdict skips the update on the device),
    and a skipped step leaves weights and optimizer state exactly as they were. Start-up never
    changes the config it loaded."""
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_skipped_steps=1",
                             *overrides, recipe=recipe)
    out = subprocess.run([sys.executable, "-c", HOST_READS, str(configs), str(tmp_path / "run")], cwd=ROOT,
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.splitlines()[-1])
    assert result == {"before_update": [0] * 3, "skipped_unchanged": True, "next_moves": True, "skipped_steps": 1,
                      "config_unchanged": True}


def one_rank(rank: int, world_size: int, port: int) -> dict:
    """The environment of one rank of a job whose other ranks never start."""
    return {"RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "ELASTIC_JOIN_TIMEOUT_S": "2"}


def test_a_rank_whose_peers_never_join_names_them_and_exits(configs, tmp_path):
    """Rank 0 of 3 alone: it hosts the store, waits ELASTIC_JOIN_TIMEOUT_S for ranks 1 and 2, names
    them and the port in one line and exits non-zero (its agent restarts it), instead of waiting out
    the collective timeout."""
    from elastic_launcher.local.hyperpod_agents import free_port

    port = free_port()
    line = one_line_error(trainer(configs, tmp_path / "run", env=one_rank(0, 3, port)))
    assert line == (f"error: rank 0 waited 2s (ELASTIC_JOIN_TIMEOUT_S) at the rendezvous store 127.0.0.1:{port} "
                    f"(MASTER_ADDR:MASTER_PORT) for rank(s) 1-2 of 3, which never joined: exiting so the agent "
                    f"restarts this worker")


def test_a_rank_that_cannot_reach_rank_0s_store_says_so_and_exits(configs, tmp_path):
    from elastic_launcher.local.hyperpod_agents import free_port

    port = free_port()
    line = one_line_error(trainer(configs, tmp_path / "run", env=one_rank(1, 2, port)))
    assert f"rank 1 could not reach the rendezvous store at 127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) (rank 0's) " \
           f"within ELASTIC_JOIN_TIMEOUT_S=2s" in line


def test_rank_0_whose_port_is_taken_says_so_and_exits(configs, tmp_path):
    """A server still listening on the job's port (another program's, or a previous world size's that
    was never stopped) is refused at once: never shared, as torch's multi-tenant store would."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(trainer(configs, tmp_path / "run", env=one_rank(0, 2, port)))
    assert line.startswith(f"error: rank 0 cannot host the rendezvous store at 127.0.0.1:{port}") and \
           "EADDRINUSE" in line, line
