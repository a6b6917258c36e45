"""A virtualenv with the training image's Python packages, for testing the trainer on the torch the
image runs and under the real HyperPod agent (`hyperpodrun`).

The pins are read from the Dockerfile, so the environment is the image's and cannot drift from it.
The venv is built once and cached (keyed by the pins) under $ELASTIC_IMAGE_VENV_CACHE, else
~/.cache/elastic-launcher; torch comes from the default package index, whose Linux build is the CUDA
one: it runs on CPU too. Prints the venv's python:

    python scripts/image_venv.py            # build if needed, print <venv>/bin/python
    python scripts/image_venv.py --check    # print it only if already built (exit 1 otherwise)
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
READY = ".ready"  # written last: a venv without it is half-built and rebuilt
# Test tools the image does not need but the suite runs inside the venv.
TEST_EXTRAS = ["pytest", "pytest-timeout"]
# The image's GPU-only packages (several GB of CUDA kernels), which no CPU test runs, and the media
# packages pinned beside torch only so that vLLM does not pull mismatched ones: left out of the venv.
GPU_ONLY = ("vllm", "torchvision", "torchaudio")


def image_pins(dockerfile: Path = DOCKERFILE) -> list[str]:
    """The requirement specifiers of the Dockerfile's `pip install` lines, index options dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    pins: list[str] = []
    for command in re.findall(r"pip install ([^&\n]+)", text):
        words = command.split()
        skip = False
        for word in words:
            if skip:
                skip = False
            elif word in ("--index-url", "--extra-index-url", "-i"):
                skip = True
            elif not word.startswith("-"):
                pins.append(word.strip("\"'"))
    return pins


def pinned_version(package: str, pins: list[str] | None = None) -> str:
    for pin in pins or image_pins():
        name, _, version = pin.partition("==")
        if name.lower() == package.lower():
            return version
    raise KeyError(f"{package} is not pinned with == in {DOCKERFILE}")


def venv_dir(kind: str, steps: list[list[str]]) -> Path:
    """Where the venv built by `steps` lives: keyed by them (and the Python), so changed pins build anew."""
    cache = Path(os.environ.get("ELASTIC_IMAGE_VENV_CACHE", Path.home() / ".cache" / "elastic-launcher"))
    key = hashlib.sha256("\n".join([" ".join(step) for step in steps] + [sys.version]).encode()).hexdigest()[:12]
    return cache / f"{kind}-venv-{key}"


def build(path: Path, steps: list[list[str]]) -> None:
    shutil.rmtree(path, ignore_errors=True)
    venv.create(path, with_pip=True)
    for step in steps:  # pip's own arguments: ["install", ...] or ["uninstall", "-y", ...]
        subprocess.run([str(path / "bin" / "python"), "-m", "pip", *step, "--quiet", "--disable-pip-version-check"],
                       check=True, stdout=sys.stderr)
    (path / READY).write_text("\n".join(" ".join(step) for step in steps) + "\n")


def venv_pins() -> list[str]:
    """The image's pins the venv installs: all but the GPU-only ones."""
    return [p for p in image_pins() if p.partition("==")[0].lower() not in GPU_ONLY]


def image_steps() -> list[list[str]]:
    pins = venv_pins()
    pip_pin = [p for p in pins if p.startswith("pip")]  # the agent requires an older pip: install it first
    others = [p for p in pins if not p.startswith("pip")]
    return [["install", *group] for group in (pip_pin, others + TEST_EXTRAS) if group]


def cached_venv(kind: str, steps: list[list[str]], check_only: bool = False) -> Path | None:
    """The python of the venv that `steps` build, built once (several processes may ask at once: one
    builds, the others wait and reuse it); None with `check_only` when it is not built yet."""
    path = venv_dir(kind, steps)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / READY).exists():
            if check_only:
                return None
            print(f"building {path} (once; several GB)", file=sys.stderr, flush=True)
            build(path, steps)
    return path / "bin" / "python"


def ensure(check_only: bool = False) -> Path | None:
    return cached_venv("image", image_steps(), check_only)


def run_main(ensure_venv) -> int:
    parser = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="do not build; exit 1 if the venv is not there")
    python = ensure_venv(parser.parse_args().check)
    if python is None:
        return 1
    print(python)
    return 0


def main() -> int:
    return run_main(ensure)


if __name__ == "__main__":
    sys.exit(main())
