"""The Python packages the GPU benches need, carried in parts to a GPU node that has no package index.

    pip list --format=freeze > node.txt                    # on the node: what it already holds
    python bench/offline_packages.py plan --have node.txt  # here: what would be carried
    python bench/offline_packages.py pack --have node.txt --out .offline --part-mib 56
    python3 bench/offline_packages.py install --parts .offline --target /tmp/site   # on the node
    export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0                          # as install prints

The requirements are the image's (the Dockerfile's pins, vLLM among them) and the project's own, resolved
for the node's Python from the package index's metadata (pip's dry-run report: no wheel is downloaded to
resolve). Carried: what the node lacks, and what it holds at a version that a requirement (ours, or a
carried package's) does not accept. Left behind: the node's compiled stack (NODE_OWN), the packages vLLM
imports only for kernels that a dense model on Hopper never runs (LEAVE), and such files inside vLLM's wheel
(DROP): FlashAttention 2's 290 MB library (Hopper runs FlashAttention 3), the MoE kernels (an optional
import), the Rust front end; vLLM then samples with its PyTorch top-k/top-p (ENVIRONMENT), not FlashInfer's.
What is carried is installed here into one folder, packed as one xz archive and cut into numbered parts,
each in a folder of its own (`<out>/01/`, ...) with the manifest, so the parts can travel one at a time;
`install` checks every part before it unpacks any.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `install` runs on the node with the standard library alone
    from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

# The node's compiled stack: its CUDA build of torch, which these packages are built against, and numpy,
# whose ABI the node's compiled packages share. Never carried: a copy would shadow it for every package.
NODE_OWN = {"torch", "torchvision", "torchaudio", "triton", "numpy"}
# Not the benches': pip itself, the pods' HyperPod agent, the launcher's submission client and full MLflow
# (the image has MLflow's skinny client), and S3's DCP connector (no bench checkpoints to S3). The
# submission client could not be resolved beside the image's boto3 anyway (python-dateutil >= 3 and < 3).
NOT_NEEDED = {"pip", "hyperpod-elastic-agent", "kubernetes", "mlflow", "s3torchconnector"}
# vLLM's requirements that only its optional kernels import (FlashInfer, TileLang, CUTLASS's DSL, quantized
# and MLA kernels, video decoding) and its server's telemetry; and CUDA's library wheels, which come with the
# node's torch (the compiler's, which those kernels pull in, are not needed).
LEAVE = ("flashinfer-*", "tilelang", "nvidia-cutlass-dsl*", "quack-kernels", "humming-kernels",
         "tokenspeed-*", "torchcodec", "pynvvideocodec", "fastsafetensors", "z3-solver", "nvidia-*", "cuda-*",
         "opentelemetry-*", "torch-c-dlpack-ext")
DROP = ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "vllm/vllm-rs")
# Without FlashInfer, vLLM's sampler must be told to take its PyTorch top-k/top-p path: on CUDA it asks for
# FlashInfer's unless this is 0 (an ImportError at the engine's start otherwise). `install` prints it.
ENVIRONMENT = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(5, 40)] + ["manylinux2014_x86_64", "manylinux2010_x86_64",
                                                                  "manylinux1_x86_64", "linux_x86_64"]
ARCHIVE = "packages.tar.xz"
PIP = [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--quiet"]


@dataclass(frozen=True)
class Package:
    name: str  # normalized: lower case, runs of -_. as one -
    version: str
    url: str
    requires: tuple[str, ...] = ()  # its Requires-Dist lines


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[str]:
    """The image's pins, then the project's own dependencies that the image does not pin (its torch
    pin is the CPU one: the image's wins)."""
    import tomllib

    from image_venv import image_pins
    from packaging.requirements import Requirement

    def name(requirement: str) -> str:
        return normalized(Requirement(requirement).name)

    image = [pin for pin in image_pins() if name(pin) not in NOT_NEEDED]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return image + [dep for dep in project if name(dep) not in NOT_NEEDED | {name(pin) for pin in image}]


def pip_options(python_version: str) -> list[str]:
    return ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
            *[option for platform in PLATFORMS for option in ("--platform", platform)]]


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PIP, *args], capture_output=True, text=True)


def pip_error(done: subprocess.CompletedProcess) -> str:
    reasons = [line for line in done.stderr.splitlines() if line.startswith("ERROR")] or done.stderr.splitlines()
    return f"error: pip {done.args[len(PIP)]} failed: {reasons[0] if reasons else done.returncode}"


def checked(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    if done.returncode:
        raise SystemExit(pip_error(done))
    return done


def resolve(reqs: list[str], python_version: str, wheels: Path) -> list[Package]:
    """Every package `reqs` need on the node's Python, from pip's dry-run report (`--isolated`: this
    machine's pip settings, such as a cap on torch, are not the node's). A requirement released only as
    source (omegaconf's ANTLR runtime) is built into a wheel under `wheels` first: pure Python, that wheel
    serves any Python."""
    built: set[str] = set()
    while True:
        with tempfile.TemporaryDirectory() as target:
            done = pip("install", "--dry-run", "--ignore-installed", "--report", "-", "--target", target,
                       "--find-links", str(wheels), *pip_options(python_version), *reqs)
        source_only = re.search(r"No matching distribution found for (\S+)", done.stderr)
        if done.returncode == 0 or source_only is None or source_only[1] in built:
            break
        built.add(source_only[1])
        checked(pip("wheel", "--no-deps", "--wheel-dir", str(wheels), source_only[1]))
    report = json.loads(checked(done).stdout)
    return [Package(normalized(item["metadata"]["name"]), item["metadata"]["version"], item["download_info"]["url"],
                    tuple(item["metadata"].get("requires_dist", ()))) for item in report["install"]]


def read_have(text: str) -> dict[str, str | None]:
    """`pip list --format=freeze` lines (`name==version`; a bare name is a package of unknown version)."""
    have: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            have[normalized(name.split(" @ ")[0])] = version.strip() or None
    return have


def accepted(version: str | None, requirement: Requirement) -> bool:
    """Whether the node's version meets `requirement`; a version not known meets all but an exact pin."""
    if version is None:
        return not any(spec.operator in ("==", "===") for spec in requirement.specifier)
    return requirement.specifier.contains(version, prereleases=True)


def to_carry(resolved: list[Package], have: dict[str, str | None], reqs: list[str],
             python_version: str) -> list[Package]:
    """What the node must be sent: each resolved package it lacks, and each it holds at a version that
    our requirements or a carried package's do not accept (what it keeps brings its own); never
    NODE_OWN or LEAVE."""
    from packaging.requirements import Requirement

    markers = {"python_version": python_version, "python_full_version": f"{python_version}.0", "extra": "",
               "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}

    def unmet(lines) -> set[str]:
        wanted = [Requirement(line) for line in lines]
        return {normalized(r.name) for r in wanted if normalized(r.name) in have
                and (r.marker is None or r.marker.evaluate(markers)) and not accepted(have[normalized(r.name)], r)}

    def sent(name: str) -> bool:
        return name not in NODE_OWN and not any(fnmatch.fnmatch(name, pattern) for pattern in LEAVE)

    requires = {package.name: package.requires for package in resolved}
    carry = {name for name in requires if name not in have and sent(name)} | {n for n in unmet(reqs) if sent(n)}
    while more := {n for n in unmet(line for name in carry for line in requires[name]) if sent(n)} - carry:
        carry |= more
    return [package for package in resolved if package.name in carry]


def split(archive: Path, out: Path, part_bytes: int, manifest: dict) -> int:
    """Cut `archive` into numbered parts, each in a folder of its own beside a copy of the manifest."""
    data = archive.read_bytes()
    parts = [data[i:i + part_bytes] for i in range(0, len(data), part_bytes)]
    manifest = {**manifest, "parts": len(parts), "sha256": hashlib.sha256(data).hexdigest()}
    for number, part in enumerate(parts, 1):
        folder = out / f"{number:02d}"
        folder.mkdir(parents=True)
        (folder / f"{ARCHIVE}.{number:02d}").write_bytes(part)
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return len(parts)


def pack_folder(folder: Path, out: Path, part_bytes: int, manifest: dict) -> int:
    """`folder` without DROP's files, as one xz archive cut into parts under `out`."""
    for pattern in DROP:
        for path in folder.glob(pattern):
            path.unlink()
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / ARCHIVE
        with tarfile.open(archive, "w:xz", preset=6) as tar:
            for path in sorted(folder.iterdir()):
                tar.add(path, arcname=path.name)
        return split(archive, out, part_bytes, manifest)


def install(parts: Path, target: Path) -> dict:
    """Join the parts under `parts`, check them against the manifest, and unpack them into `target`."""
    manifests = sorted(parts.glob("[0-9][0-9]/manifest.json"))
    if not manifests:
        raise SystemExit(f"error: no parts under {parts}: pass the folder `pack --out` wrote (its 01/, 02/, ...)")
    manifest = json.loads(manifests[0].read_text())
    names = [f"{n:02d}/{ARCHIVE}.{n:02d}" for n in range(1, manifest["parts"] + 1)]
    missing = [name.split("/")[0] for name in names if not (parts / name).is_file()]
    if missing:
        raise SystemExit(f"error: parts {', '.join(missing)} of {manifest['parts']} are not under {parts}: "
                         f"bring them beside the others")
    data = b"".join((parts / name).read_bytes() for name in names)
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise SystemExit(f"error: the parts under {parts} are not those of one pack (checksum differs): "
                         f"bring the parts of one `pack` run")
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
        tar.extractall(target, filter="tar")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["plan", "pack", "install"])
    parser.add_argument("--have", type=Path, help="the node's `pip list --format=freeze`")
    parser.add_argument("--python-version", default="3.12", help="the node's Python (default 3.12)")
    parser.add_argument("--out", type=Path, default=ROOT / ".offline")
    parser.add_argument("--part-mib", type=int, default=56)
    parser.add_argument("--parts", type=Path, default=ROOT / ".offline", help="install: where the parts are")
    parser.add_argument("--target", type=Path, default=Path("/tmp/site"), help="install: the folder for PYTHONPATH")
    args = parser.parse_args(argv)

    if args.command == "install":
        manifest = install(args.parts, args.target)
        exports = " ".join(f"{k}={v}" for k, v in {"PYTHONPATH": args.target, **manifest["environment"]}.items())
        print(f"{len(manifest['packages'])} packages in {args.target}: export {exports}")
        return
    if args.have is None or not args.have.is_file():
        raise SystemExit(f"error: --have {args.have} is not a file: pass the node's `pip list --format=freeze`")
    if args.command == "pack" and args.out.exists():
        raise SystemExit(f"error: --out {args.out} exists: remove it or name another folder")
    reqs = requirements()
    with tempfile.TemporaryDirectory() as scratch:
        built, wheels, folder = (Path(scratch) / name for name in ("built", "wheels", "site"))
        resolved = resolve(reqs, args.python_version, built)
        carry = to_carry(resolved, read_have(args.have.read_text()), reqs, args.python_version)
        for package in carry:
            print(f"{package.name}=={package.version}")
        if args.command == "plan":
            print(f"{len(carry)} of {len(resolved)} packages to carry")
            return
        checked(pip("download", "--no-deps", "--dest", str(wheels), *pip_options(args.python_version),
                    *[package.url for package in carry]))
        checked(pip("install", "--no-deps", "--no-compile", "--target", str(folder), *pip_options(args.python_version),
                    *map(str, sorted(wheels.iterdir()))))
        shutil.rmtree(folder / "bin", ignore_errors=True)  # console scripts: their shebang is this machine's
        partial = args.out.with_name(f"{args.out.name}.partial")  # no half-written pack under --out
        shutil.rmtree(partial, ignore_errors=True)
        count = pack_folder(folder, partial, args.part_mib << 20,
                            {"python": args.python_version, "environment": ENVIRONMENT,
                             "packages": [f"{p.name}=={p.version}" for p in carry]})
        partial.rename(args.out)
    print(f"{count} parts under {args.out}, at most {args.part_mib} MiB each")


if __name__ == "__main__":
    main()
