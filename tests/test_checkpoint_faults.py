"""Checkpoints under faults, in one process (gloo world of one): a corrupted or truncated newest
checkpoint falls back to the previous one, a non-finite model is never saved, a full disk is a
clear error with nothing left behind, pruning keeps the newest checkpoint, and the node-local tier
is used only where its copy is whole and current."""

import errno
import os
import shutil
import time

import pytest
import torch

from conftest import tiny_causal_lm
from training.state import checkpoint_files
from training.contract.checkpoint_dirs import COMPLETE, CORRUPT_SUFFIX, complete_checkpoints, is_checkpoint, step_dir
from training.state.checkpoint import Checkpointer, CheckpointError, TrainState
from training.state.node_local import NODE_LOCAL, SHARED, NodeLocalTier


def make(root, keep_last=3, node_memory=None):
    """A checkpointer over `root`; with `node_memory`, its node keeps a copy of its shards there (the
    pod's memory volume)."""
    model = tiny_causal_lm("llama")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, optimizer, Checkpointer(root, keep_last=keep_last, async_save=False, rank=0, world_size=1,
                                          node_local=NodeLocalTier(node_memory))


def save_steps(root, *steps, node_memory=None):
    model, optimizer, ckpt = make(root, node_memory=node_memory)
    for step in steps:
        with torch.no_grad():
            model.lm_head.weight.fill_(float(step))
        ckpt.save(model, optimizer, TrainState(step=step, consumed_samples=8 * step))
    return model


def load(root, node_memory=None):
    model, optimizer, ckpt = make(root, node_memory=node_memory)
    state = ckpt.load(model, optimizer, {}, ignore_fingerprint=False)
    return state, model, ckpt


def largest_shard(path):
    return max(path.glob("*.distcp"), key=lambda f: f.stat().st_size)


@pytest.mark.parametrize("damage", ["flip bytes", "truncate"])
def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, process_group, capsys, damage):
    save_steps(tmp_path, 4, 8)
    shard = largest_shard(step_dir(tmp_path, 8))
    data = bytearray(shard.read_bytes())
    if damage == "flip bytes":
        data[len(data) // 2: len(data) // 2 + 64] = b"\xff" * 64  # same size, different bytes
    else:
        data = data[: len(data) // 2]
    shard.write_bytes(bytes(data))
    state, model, _ = load(tmp_path)
    assert state.step == 4 and torch.all(model.lm_head.weight == 4.0)
    assert (tmp_path / f"step-00000008{CORRUPT_SUFFIX}").is_dir() and not step_dir(tmp_path, 8).exists()
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "step-00000008" in warning[0] and "previous one" in warning[0]


@pytest.mark.parametrize("values", [["nan"], ["inf"], ["inf", "-inf"]])  # opposite infinities must not cancel out
def test_a_non_finite_model_is_never_saved(tmp_path, process_group, values):
    model = save_steps(tmp_path, 4)
    _, optimizer, ckpt = make(tmp_path)
    with torch.no_grad():
        for i, value in enumerate(values):
            model.lm_head.weight[0, i] = float(value)
    with pytest.raises(CheckpointError,
                       match=r"step-00000008 holds non-finite values on 1 rank\(s\): not saved.*stays step-00000004"):
        ckpt.save(model, optimizer, TrainState(step=8))
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step-00000004"]
    assert not step_dir(tmp_path, 8).exists()


def test_too_little_disk_space_is_refused_before_writing(tmp_path, process_group, monkeypatch):
    save_steps(tmp_path, 4)
    model, optimizer, ckpt = make(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(CheckpointError, match=r"not enough disk space for checkpoint .*step-00000008: needs "
                                              r"~[\d.]+ [KM]B, 1 KB free: free space"):
        ckpt.save(model, optimizer, TrainState(step=8))
    assert not step_dir(tmp_path, 8).exists()


@pytest.mark.parametrize("resuming", [False, True], ids=["first start", "relaunch"])
def test_a_run_whose_next_save_cannot_fit_is_refused_at_start(tmp_path, process_group, monkeypatch, resuming):
    """Checked before the first step: the newest checkpoint's size (+5%) when relaunching, else the
    model and AdamW state estimated from the shards, against the free space."""
    from training.state.checkpoint_files import bytes_on_disk

    save_steps(tmp_path / "measure", 4)
    actual = bytes_on_disk(step_dir(tmp_path / "measure", 4))
    if resuming:
        save_steps(tmp_path / "run", 4)
    model, _, ckpt = make(tmp_path / "run")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - 2000, 2000))
    with pytest.raises(CheckpointError, match=r"checkpoint .*step-00000008: needs ~([\d.]+) MB, 2 KB free") as err:
        ckpt.check_space(model, next_step=8)
    need = float(err.value.args[0].split("~")[1].split()[0]) * 1e6
    assert need == pytest.approx(actual * 1.05, rel=0.01) if resuming else need == pytest.approx(actual, rel=0.25)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 0, 10**12))
    ckpt.check_space(model, next_step=8)  # room enough: no complaint


def test_a_full_disk_mid_save_leaves_no_partial_and_says_so(tmp_path, process_group, monkeypatch):
    import torch.distributed.checkpoint as dcp

    model, optimizer, ckpt = make(tmp_path)

    def write_half_then_fail(state_dict, **kwargs):
        (tmp_path / "step-00000004" / "__0_0.distcp").write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dcp, "save", write_half_then_fail)
    with pytest.raises(CheckpointError, match="step-00000004 failed and was removed.*No space left on device"):
        ckpt.save(model, optimizer, TrainState(step=4))
    assert not step_dir(tmp_path, 4).exists()


def test_keep_last_one_keeps_the_newest_and_drops_partials(tmp_path, process_group):
    model, optimizer, ckpt = make(tmp_path, keep_last=1)
    ckpt.save(model, optimizer, TrainState(step=2))
    partial = step_dir(tmp_path, 3)
    partial.mkdir()
    ckpt.save(model, optimizer, TrainState(step=4))
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000004"]
    manifest = (step_dir(tmp_path, 4) / COMPLETE).read_text()
    assert "__0_0.distcp" in manifest and ".metadata" in manifest


@pytest.mark.parametrize("released", [True, False])
def test_an_in_place_stop_puts_its_files_on_the_disk_after_the_next_start_and_only_then_prunes(
        tmp_path, process_group, monkeypatch, released):
    """A resize in place saves without fsync; the files reach the disk when the next size has taken
    its first step (release) or at the deadline, and the checkpoint before stays until they have."""
    monkeypatch.setattr(checkpoint_files, "SYNC_DEADLINE_S", 60 if released else 2)
    model, optimizer, ckpt = make(tmp_path, keep_last=1)
    ckpt.save(model, optimizer, TrainState(step=2))
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    ckpt.save(model, optimizer, TrainState(step=4), blocking=True, sync_later=True)
    pending = ckpt.unsynced
    assert pending.target == step_dir(tmp_path, 4) and is_checkpoint(pending.target)
    assert not synced and step_dir(tmp_path, 2).exists()  # the fallback stays while step 4 is not durable
    time.sleep(0.5)
    assert not synced and step_dir(tmp_path, 2).exists()
    if released:
        pending.release()
    assert pending.done.wait(timeout=30)
    shard, complete = str(largest_shard(pending.target)), str(pending.target / COMPLETE)
    assert shard in synced and complete in synced and synced.index(shard) < synced.index(complete)
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000004"]


# --- the node-local tier ------------------------------------------------------------------------------
def save_tiered(tmp_path, *steps):
    save_steps(tmp_path / "shared", *steps, node_memory=tmp_path / "node")


def load_tiered(tmp_path):
    state, model, ckpt = load(tmp_path / "shared", node_memory=tmp_path / "node")
    return state, float(model.lm_head.weight[0, 0].detach()), ckpt.load_tiers


def node_steps(tmp_path):
    """Where the node keeps its copies of checkpoint shards."""
    return tmp_path / "node" / "checkpoints"


def shard_bytes(path):
    return sum(f.stat().st_size for f in path.glob("*.distcp"))


def cross_device(src, dst):
    raise OSError(errno.EXDEV, "Invalid cross-device link")


@pytest.mark.parametrize("copy", ["linked", "copied"])
def test_a_restart_reads_the_nodes_own_copy_and_the_node_keeps_only_the_newest(tmp_path, process_group, monkeypatch,
                                                                               copy):
    if copy == "copied":  # a pod's memory volume is another filesystem than the shared volume
        monkeypatch.setattr(os, "link", cross_device)
    save_tiered(tmp_path, 4, 8)
    node_copy = largest_shard(node_steps(tmp_path) / "step-00000008")
    assert (node_copy.stat().st_ino == largest_shard(step_dir(tmp_path / "shared", 8)).stat().st_ino) == (copy == "linked")
    assert [p.name for p in node_steps(tmp_path).iterdir()] == ["step-00000008"]  # step 4's copy dropped
    state, weight, tiers = load_tiered(tmp_path)
    assert (state.step, weight) == (8, 8.0)
    assert tiers[NODE_LOCAL] == shard_bytes(step_dir(tmp_path / "shared", 8)) and tiers[SHARED] == 0


@pytest.mark.parametrize("damage", ["lost", "truncated", "stale", "corrupted"])
def test_a_node_copy_that_is_gone_partial_stale_or_corrupt_is_read_from_the_shared_volume(tmp_path, process_group,
                                                                                           capsys, damage):
    save_tiered(tmp_path, 4)
    stale = tmp_path / "stale"
    shutil.copytree(node_steps(tmp_path), stale)
    save_tiered(tmp_path, 8)
    node_copy = largest_shard(node_steps(tmp_path) / "step-00000008")

    def damage_node_copy(data: bytes) -> None:  # the node's copy only (here a hard link of the shared file)
        node_copy.with_suffix(".new").write_bytes(data)
        node_copy.with_suffix(".new").replace(node_copy)

    if damage == "lost":  # the node died, or left and came back empty
        shutil.rmtree(tmp_path / "node")
    elif damage == "truncated":  # memory ran short mid-copy
        damage_node_copy(node_copy.read_bytes()[:1000])
    elif damage == "stale":  # the node holds an older step than the shared volume's newest
        shutil.rmtree(node_steps(tmp_path))
        shutil.copytree(stale, node_steps(tmp_path))
    else:  # same size, other bytes: only the items' checksums can tell
        data = bytearray(node_copy.read_bytes())
        data[len(data) // 2: len(data) // 2 + 64] = b"\xff" * 64
        damage_node_copy(bytes(data))
    whole = shard_bytes(step_dir(tmp_path / "shared", 8))
    state, weight, tiers = load_tiered(tmp_path)
    assert (state.step, weight) == (8, 8.0)  # never step 4, and never the damaged bytes
    # A truncated file is read from the shared volume, the node's other files from its memory; a
    # corrupted copy makes the load repeat from the shared volume alone.
    from_shared = largest_shard(step_dir(tmp_path / "shared", 8)).stat().st_size if damage == "truncated" else whole
    assert tiers == {NODE_LOCAL: whole - from_shared, SHARED: from_shared}
    assert step_dir(tmp_path / "shared", 8).is_dir() and "unusable" not in capsys.readouterr().err


def test_a_node_copy_of_a_step_the_shared_volume_does_not_show_complete_is_never_used(tmp_path, process_group):
    """The shared volume lags (or the save failed there): its COMPLETE is the only authority."""
    save_tiered(tmp_path, 4, 8)
    (step_dir(tmp_path / "shared", 8) / COMPLETE).unlink()
    state, weight, tiers = load_tiered(tmp_path)
    assert (state.step, weight) == (4, 4.0) and tiers[NODE_LOCAL] == 0


def test_a_full_node_memory_volume_keeps_no_partial_copy_and_the_save_completes(tmp_path, process_group, capsys,
                                                                                monkeypatch):
    def full(src, dst, **kwargs):
        open(dst, "wb").write(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "link", cross_device)  # a pod's memory volume: the bytes are copied
    monkeypatch.setattr(shutil, "copyfile", full)
    save_tiered(tmp_path, 4, 8)
    assert (step_dir(tmp_path / "shared", 8) / COMPLETE).exists()
    assert not [f for f in (tmp_path / "node").rglob("*") if f.is_file()]
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 1 and "node-local copy of step-00000004 failed (No space left on device)" in warnings[0]
    monkeypatch.undo()
    assert load_tiered(tmp_path)[0].step == 8
