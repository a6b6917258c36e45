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
# The image's GPU-only packages (several GB of CUDA kernels), which no CPU test runs: left out of the venv.
GPU_ONLY = ("vllm",)


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


def venv_dir(pins: list[str]) -> Path:
    cache = Path(os.environ.get("ELASTIC_IMAGE_VENV_CACHE", Path.home() / ".cache" / "elastic-launcher"))
    key = hashlib.sha256("\n".join(pins + TEST_EXTRAS + [sys.version]).encode()).hexdigest()[:12]
    return cache / f"image-venv-{key}"


def build(path: Path, pins: list[str]) -> None:
    shutil.rmtree(path, ignore_errors=True)
    venv.create(path, with_pip=True)
    python = str(path / "bin" / "python")
    pip_pin = [p for p in pins if p.startswith("pip")]  # the agent requires an older pip: install it first
    others = [p for p in pins if not p.startswith("pip")]
    for group in (pip_pin, others + TEST_EXTRAS):
        if group:
            subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *group],
                           check=True, stdout=sys.stderr)
    (path / READY).write_text("\n".join(pins) + "\n")


def venv_pins() -> list[str]:
    """The image's pins the venv installs: all but the GPU-only ones."""
    return [p for p in image_pins() if p.partition("==")[0].lower() not in GPU_ONLY]


def ensure(check_only: bool = False) -> Path | None:
    pins = venv_pins()
    path = venv_dir(pins)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder; the others wait for it and reuse its venv
        if not (path / READY).exists():
            if check_only:
                return None
            print(f"building {path} from the Dockerfile's pins (once; several GB)", file=sys.stderr, flush=True)
            build(path, pins)
    return path / "bin" / "python"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="do not build; exit 1 if the venv is not there")
    python = ensure(parser.parse_args().check)
    if python is None:
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
