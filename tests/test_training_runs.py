"""Multi-process CPU runs of the trainer (gloo, torchrun, hard timeouts): resume, resize, elastic stop."""

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from conftest import (assert_stops_cleanly, committed_samples, killed_if_left, local_job, losses, records,
                      render_configs, running, train, wait_for)
from elastic_launcher.local.run import child_pids
from training.state.checkpoint import COMPLETE, latest_checkpoint, step_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
# The tests that compare with the module's fixed-size run: on one worker, which runs it once.
SHARES_THE_FIXED_RUN = pytest.mark.xdist_group("test_training_runs")
STEPS = 8
# A step's loss is a mean over ~70 label tokens whose bf16 logits carry rounding errors of up to
# bf16's unit roundoff u = 2^-8 each; independent errors move the mean by about u / sqrt(70) = u / 8.
BF16_LOSS_REL = 2**-8 / 8
TINY = ["recipes.training_config.logging.audit_samples=true", f"recipes.training_config.training_args.max_steps={STEPS}",
        "recipes.training_config.checkpoint.save_steps=1000"]


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    return render_configs(tmp_path_factory.mktemp("configs"), *TINY)


@pytest.fixture(scope="module")
def fixed_run(configs, tmp_path_factory):
    """The reference: 8 steps on 2 processes, never interrupted."""
    run = tmp_path_factory.mktemp("fixed") / "run"
    train(configs, run, nodes=2)
    return run


def assert_same_run(run_dir, reference, rel, packed=False):
    got, want = losses(run_dir), losses(reference)
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    for step in want:
        assert abs(got[step] - want[step]) <= rel * abs(want[step]), (step, got[step], want[step])
    samples, reference_samples = committed_samples(run_dir), committed_samples(reference)
    assert samples == reference_samples
    flat = [i for step in sorted(samples) for i in samples[step]]
    assert len(flat) == len(set(flat))  # none repeated
    assert len(flat) > STEPS * 8 if packed else len(flat) == STEPS * 8  # a packed row holds several samples


@SHARES_THE_FIXED_RUN
def test_resize_2_3_1_matches_the_fixed_size_run(configs, fixed_run, tmp_path):
    """On the image's torch the same holds under the real HyperPod agent (tests/test_hyperpod_agent.py:
    2 -> 3 -> 3 -> 2 -> 1 nodes against a fixed-size run on that torch)."""
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=2, stop_at_step=3)
    train(configs, run_dir, nodes=3, stop_at_step=6)  # 8 samples over 3 ranks: 2 + 3 + 3
    train(configs, run_dir, nodes=1)
    sizes = {r["step"]: r["world_size"] for r in records(run_dir) if "loss" in r}
    assert sizes == {1: 2, 2: 2, 3: 2, 4: 3, 5: 3, 6: 3, 7: 1, 8: 1}
    starts = [r for r in records(run_dir) if r.get("event") == "start"]
    assert [s["per_rank_batch"] for s in starts] == [[4, 4], [2, 3, 3], [8]]
    assert_same_run(run_dir, fixed_run, rel=1e-5)


def test_resize_2_3_1_with_packing_and_compile_matches_the_fixed_size_run(tmp_path, monkeypatch):
    """The GPU defaults (packed rows with per-sample attention, per-layer compile) keep the resize
    guarantees. The runs share one inductor cache, as a job's launches share the run's volume."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor_cache"))
    configs = render_configs(tmp_path / "configs", *TINY, "recipes.training_config.model_config.compile=true",
                             "recipes.training_config.datasets.packing=true")
    train(configs, tmp_path / "fixed", nodes=2, timeout=400)
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=2, stop_at_step=3)
    train(configs, run_dir, nodes=3, stop_at_step=6)
    train(configs, run_dir, nodes=1)
    assert_same_run(run_dir, tmp_path / "fixed", rel=1e-5, packed=True)


# Each signal on one torch build, each build with one signal: the HyperPod agent's SIGUSR1 on the image's
# torch, torchrun's and Kubernetes' SIGTERM on requirements.txt's.
@pytest.mark.parametrize("sig, torch_python", [(signal.SIGUSR1, "image"), (signal.SIGTERM, "requirements")],
                         ids=["SIGUSR1-image", "SIGTERM-requirements"], indirect=["torch_python"])
def test_elastic_signal_checkpoints_and_exits_zero(tmp_path, sig, torch_python):
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=100000",
                             "recipes.training_config.checkpoint.save_steps=1000")
    run_dir = tmp_path / "run"
    proc = local_job(configs, run_dir, torch_python).start(nodes=2, log=open(tmp_path / "torchrun.log", "wb"))
    with killed_if_left(proc):
        wait_for(lambda: any(r.get("step", 0) >= 2 and "loss" in r for r in records(run_dir)), timeout=180)
        workers = child_pids(proc.pid)
        assert len(workers) == 2
        os.kill(workers[1], sig)  # one rank hears it; all must agree to stop at the same step
        assert proc.wait(timeout=120) == 0, (tmp_path / "torchrun.log").read_text()[-2000:]
    stop = [r for r in records(run_dir) if r.get("event") == "stop"]
    assert len(stop) == 1
    latest = latest_checkpoint(run_dir / "checkpoints")
    assert latest == step_dir(run_dir / "checkpoints", stop[0]["step"]) and (latest / COMPLETE).exists()
    assert stop[0]["step"] == max(losses(run_dir))


def blocks_stop_signals(pid: int) -> bool:
    """Whether worker `pid` runs the trainer and has blocked the stop signals. Between fork and exec
    the child is still torchrun, with every signal blocked for a moment (CPython's vfork), and a
    signal sent then is delivered unblocked after the exec: that is not the worker's doing."""
    if b"torch.distributed.run" in Path(f"/proc/{pid}/cmdline").read_bytes():
        return False
    status = Path(f"/proc/{pid}/status").read_text()
    blocked = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
    return all(blocked & (1 << (sig - 1)) for sig in (signal.SIGUSR1, signal.SIGTERM))


@pytest.mark.parametrize("moment, torch_python", [("importing", "image"), ("loading", "requirements")],
                         ids=["importing-image", "loading-requirements"], indirect=["torch_python"])
def test_a_stop_signal_at_start_up_ends_every_rank_within_seconds(tmp_path, moment, torch_python):
    """One worker of three hears SIGUSR1 while the job starts (importing torch, before the process
    group exists; or loading data and model, after it does): every rank ends within seconds with
    exit 0, and no partial checkpoint is left."""
    configs = render_configs(tmp_path / "configs", *TINY)
    run_dir = tmp_path / "run"
    log = tmp_path / "torchrun.log"
    proc = local_job(configs, run_dir, torch_python).start(nodes=3, log=open(log, "wb"))
    with killed_if_left(proc):
        wait_for(lambda: len(child_pids(proc.pid)) == 3, timeout=60, interval=0.02)
        # the worker's first statements block the stop signals (before that, the interpreter itself is starting)
        worker = child_pids(proc.pid)[2]
        wait_for(lambda: blocks_stop_signals(worker), timeout=60, interval=0.01)
        if moment == "loading":  # rank 0 logs `start` once the process group and the data are ready
            wait_for(lambda: any(r.get("event") == "start" for r in records(run_dir)), timeout=120, interval=0.02)
        os.kill(worker, signal.SIGUSR1)
        assert_stops_cleanly(proc, log)
    root = run_dir / "checkpoints"
    partial = [p for p in root.glob("step-*") if not (p / COMPLETE).exists()] if root.exists() else []
    assert not partial


@pytest.mark.parametrize("async_save", [True, False], ids=["async-save", "blocking-save"])
def test_a_stop_of_every_rank_during_start_up_ends_each_within_seconds(tmp_path, async_save):
    """Every worker of three gets SIGTERM (a pod deletion) just after start-up began its last part
    (rank 0 has logged `start`; the checkpointer, whose async writer creates a process group through
    the store, comes next): each is gone within a few seconds, none waits on a store call the main
    thread holds."""
    configs = render_configs(tmp_path / "configs", *TINY, "recipes.training_config.training_args.max_steps=100000",
                             f"recipes.training_config.checkpoint.async_save={str(async_save).lower()}")
    run_dir = tmp_path / "run"
    log = tmp_path / "torchrun.log"
    proc = local_job(configs, run_dir).start(nodes=3, log=open(log, "wb"))
    with killed_if_left(proc):
        wait_for(lambda: any(r.get("event") == "start" for r in records(run_dir)), timeout=120, interval=0.01)
        time.sleep(0.1)
        workers = child_pids(proc.pid)
        for pid in workers:
            os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not any(running(pid) for pid in workers), timeout=5, interval=0.05)
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
    # Each rank says why it left: its own signal, or a peer's announcement its watcher saw first.
    said = log.read_text()
    own, peer = (said.count(f"{who} during start-up: exiting without a checkpoint") for who in ("SIGTERM", "a peer stopped"))
    assert own >= 1 and own + peer == 3, said[-2000:]


@SHARES_THE_FIXED_RUN
def test_a_resume_skips_an_incomplete_newest_checkpoint_and_reproduces_the_uninterrupted_run(configs, fixed_run, tmp_path):
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=2, stop_at_step=4)
    assert latest_checkpoint(run_dir / "checkpoints") == step_dir(run_dir / "checkpoints", 4)
    # A save of step 6 cut short by SIGKILL: shards on disk, no COMPLETE marker.
    partial = step_dir(run_dir / "checkpoints", 6)
    shutil.copytree(step_dir(run_dir / "checkpoints", 4), partial)
    (partial / COMPLETE).unlink()
    train(configs, run_dir, nodes=2)
    resumed = [r for r in records(run_dir) if r.get("event") == "resume"]
    assert resumed[-1]["step"] == 4
    assert not partial.exists()  # cleaned up once a newer checkpoint completed
    assert_same_run(run_dir, fixed_run, rel=1e-6)


@SHARES_THE_FIXED_RUN
def test_async_checkpoints_resume_exactly_and_only_the_last_are_kept(configs, fixed_run, tmp_path):
    async_configs = render_configs(tmp_path / "configs", *TINY, "recipes.training_config.checkpoint.save_steps=1",
                                   "recipes.training_config.checkpoint.async_save=true",
                                   "recipes.training_config.checkpoint.keep_last=2")
    run_dir = tmp_path / "run"
    train(async_configs, run_dir, nodes=2, stop_at_step=5)
    root = run_dir / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step-00000004", "step-00000005"]
    shutil.rmtree(step_dir(root, 5))  # resume from step 4, written in the background while training went on
    train(configs, run_dir, nodes=2)
    assert [r["step"] for r in records(run_dir) if r.get("event") == "resume"] == [4]
    assert_same_run(run_dir, fixed_run, rel=1e-6)


def test_tiny_gpt_oss_trains_under_fsdp2(tmp_path):
    configs = render_configs(tmp_path / "configs", "recipes.training_config.training_args.max_steps=6",
                             "recipes.training_config.model_config.activation_checkpointing=full",
                             recipe="gpt_oss/tiny_gpt_oss_sft")
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=2)
    curve = losses(run_dir)
    assert sorted(curve) == list(range(1, 7)) and all(v == v and v > 0 for v in curve.values())
    assert curve[6] < curve[1]
    assert (latest_checkpoint(run_dir / "checkpoints") / COMPLETE).exists()


def test_pretrained_weights_reach_every_rank(tmp_path):
    """Each rank reads its shards of a local checkpoint: two ranks must train exactly as one does, also
    after a resume (which builds the model without reading or initializing weights). Tied
    embeddings, as in Llama 3.2, must stay tied on every path."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=512, max_position_embeddings=256,
                                 tie_word_embeddings=True)).save_pretrained(tmp_path / "model")
    configs = render_configs(tmp_path / "configs", "recipes.training_config.model_config.architecture=null",
                             f"recipes.training_config.model_config.model_name_or_path={tmp_path / 'model'}",
                             "recipes.training_config.training_args.max_steps=4")
    train(configs, tmp_path / "one", nodes=1)
    train(configs, tmp_path / "two", nodes=2, stop_at_step=2)
    train(configs, tmp_path / "two", nodes=2)
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert sorted(one) == sorted(two) == [1, 2, 3, 4]
    for step in one:
        assert abs(one[step] - two[step]) <= 1e-5 * one[step], (step, one[step], two[step])


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_resize_in_bf16_follows_the_fixed_size_run(tmp_path, lora):
    """The GPU's precision on CPU: bf16 compute with fp32 master weights and fp32 gradient reduction
    (MixedPrecisionPolicy follows the setting, not the device), and under LoRA the frozen base
    stored in bf16 (2 -> 1 nodes; the full variant 2 -> 3 -> 1). A resize changes which rows share a
    matmul and the order gradients are summed in, so bf16 results differ in their last bits: the
    losses follow the fixed-size run within BF16_LOSS_REL of it, while no sample is repeated or
    skipped, exactly."""
    bf16 = [*TINY, "recipes.training_config.model_config.mixed_precision=bf16",
            *(["recipes.training_config.model_config.peft_config={peft_type:lora,r:8,lora_alpha:16,lora_dropout:0.0}"]
              if lora else [])]
    configs = render_configs(tmp_path / "configs", *bf16)
    train(configs, tmp_path / "fixed", nodes=2)
    run_dir = tmp_path / "run"
    train(configs, run_dir, nodes=2, stop_at_step=3)
    if not lora:  # LoRA at the uneven 3-node split: test_lora_dpo.py's resize, in fp32
        train(configs, run_dir, nodes=3, stop_at_step=6)
    train(configs, run_dir, nodes=1)
    assert_same_run(run_dir, tmp_path / "fixed", rel=BF16_LOSS_REL)
