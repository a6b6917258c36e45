"""The image's self-check, run by every GPU pod before it trains (and by hand: `python -m training.doctor`).

What a slim or mismatched image gets wrong only shows on a GPU, after the nodes are paid for:
- no C compiler: Triton builds its kernel launchers with one at run time (`$CC`, else gcc, else
  clang), and the trainer reaches Triton on its first forward (compiled decoder layers, flex
  attention's compiled mask builder): `RuntimeError: Failed to find C compiler`;
- EFA devices but no aws-ofi-nccl: NCCL falls back to TCP sockets without a word, at a fraction of the
  bandwidth, though the pod requested `vpc.amazonaws.com/efa`;
- a CUDA runtime newer than the driver: CUDA cannot start at all.
Each finding is one line saying what is missing and how to fix the image. The checks take their
inputs (environment, /sys, library paths, versions) as arguments, so they are tested off a GPU.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from training.contract.errors import ConfigError
from training.contract.vllm_builds import IMAGE, installed

OFI_PLUGINS = ("libnccl-net-ofi.so", "libnccl-net.so")  # aws-ofi-nccl's names, newest first
IMAGE_FIX = "build the image from the repository's Dockerfile (a CUDA devel base with the EFA installer) or FROM an " \
            "AWS PyTorch training DLC"


@dataclass(frozen=True)
class Network:
    """How NCCL will reach other nodes: over EFA through aws-ofi-nccl, or TCP sockets."""

    efa_devices: tuple[str, ...]
    ofi_plugin: Path | None

    def describe(self) -> str:
        if self.ofi_plugin and self.efa_devices:
            return f"NCCL network: OFI over {len(self.efa_devices)} EFA device(s) ({self.ofi_plugin})"
        return "NCCL network: TCP sockets (no EFA devices)" if not self.efa_devices else "NCCL network: TCP sockets"


def c_compiler(env: dict[str, str] | None = None) -> str:
    """The compiler Triton will use, found as Triton finds it; ConfigError if there is none."""
    env = os.environ if env is None else env
    found = env.get("CC") or shutil.which("gcc", path=env.get("PATH")) or shutil.which("clang", path=env.get("PATH"))
    if not found:
        raise ConfigError(f"no C compiler in the image (CC unset, no gcc or clang on PATH): Triton compiles its kernel "
                          f"launchers with one at run time (compiled layers, flex attention); {IMAGE_FIX}, or "
                          f"`apt-get install gcc`")
    return found


def efa_devices(sys_root: Path = Path("/")) -> tuple[str, ...]:
    """The EFA devices the pod sees (RDMA devices bound to the efa driver)."""
    devices = sys_root / "sys/class/infiniband"
    if not devices.is_dir():
        return ()
    return tuple(sorted(d.name for d in devices.iterdir() if (d / "device" / "driver").resolve().name == "efa"))


def ofi_plugin(env: dict[str, str] | None = None) -> Path | None:
    """aws-ofi-nccl where NCCL's dlopen will find it: NCCL_NET_PLUGIN, LD_LIBRARY_PATH, or the
    dynamic linker's cache (a plugin installed into a system library directory)."""
    import ctypes.util

    env = os.environ if env is None else env
    named = env.get("NCCL_NET_PLUGIN")
    dirs = [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    names = ([named if named.endswith(".so") else f"libnccl-net-{named}.so"] if named else []) + list(OFI_PLUGINS)
    for directory in dirs:
        for name in names:
            if (directory / name).is_file():
                return directory / name
    if named and Path(named).is_file():
        return Path(named)
    cached = next(filter(None, (ctypes.util.find_library(n.removeprefix("lib").removesuffix(".so")) for n in names)), None)
    return Path(cached) if cached else None


def network(env: dict[str, str] | None = None, sys_root: Path = Path("/")) -> Network:
    """The network NCCL will use; ConfigError where EFA devices are present but NCCL cannot use them."""
    found = Network(efa_devices(sys_root), ofi_plugin(env))
    if found.efa_devices and found.ofi_plugin is None:
        raise ConfigError(f"the pod has EFA devices ({', '.join(found.efa_devices)}) but NCCL's OFI plugin (aws-ofi-nccl: "
                          f"{' or '.join(OFI_PLUGINS)}) is not on LD_LIBRARY_PATH, so NCCL would use TCP sockets; "
                          f"{IMAGE_FIX}")
    return found


def driver_supports(runtime_cuda: str | None, driver_version: int) -> None:
    """ConfigError where the driver (CUDA's integer form, 12040 = 12.4) is older than the CUDA
    runtime torch was built with."""
    if not runtime_cuda or not driver_version:
        return
    major, minor = (int(part) for part in runtime_cuda.split(".")[:2])
    if driver_version < major * 1000 + minor * 10:
        have = f"{driver_version // 1000}.{driver_version % 1000 // 10}"
        raise ConfigError(f"the node's NVIDIA driver supports CUDA {have}, older than the CUDA {runtime_cuda} torch was "
                          f"built with: build the image with a torch for CUDA <= {have} (--index-url .../cu{have.replace('.', '')}),"
                          f" or update the nodes' driver")


def driver_cuda_version() -> int:
    """The newest CUDA the node's driver supports (1000 * major + 10 * minor), from the driver
    itself: torch has no public call for it."""
    version = ctypes.c_int()
    ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
    return version.value


def triton_compiles(device) -> None:
    """One tiny kernel through torch.compile (Triton): the compiler, headers and cache all work."""
    import torch

    try:
        torch.compile(lambda x: x * 2 + 1)(torch.ones(8, device=device))
    except Exception as e:  # noqa: BLE001 - whatever breaks, the fix is in the image
        raise ConfigError(f"Triton could not compile a kernel ({type(e).__name__}: {str(e).splitlines()[0][:200]}): "
                          f"{IMAGE_FIX}") from None


def vllm_report(version: str | None, requires: list[str], torch_version: str, env: dict[str, str],
                kernels_error: str | None = None) -> str:
    """The line on the installed vLLM (GRPO's rollouts); ConfigError where it was built for another
    torch than this one, or where its compiled kernels do not load (a CUDA of their own)."""
    if version is None:
        return "vLLM: not installed (GRPO samples with the trainer's own model)"
    wanted = next((r.replace(" ", "").split("==", 1)[1].split(";")[0] for r in requires
                   if r.replace(" ", "").startswith("torch==")), None)
    if wanted and torch_version.split("+")[0] != wanted.split("+")[0]:
        raise ConfigError(f"vLLM {version} requires torch=={wanted} but the image has torch {torch_version}: pin the "
                          f"vLLM release built for the image's torch (the Dockerfile's {IMAGE.pin} for torch "
                          f"{IMAGE.torch})")
    if kernels_error:
        raise ConfigError(f"vLLM {version}'s compiled kernels do not load beside torch {torch_version} "
                          f"({kernels_error}): vLLM and torch need one CUDA (the Dockerfile's torch from the cu130 "
                          f"index on a CUDA 13 base)")
    invariant = env.get("VLLM_BATCH_INVARIANT") == "1"
    return f"vLLM {version}, batch invariance " + ("on" if invariant else "off (VLLM_BATCH_INVARIANT=1 makes rollouts "
                                                                         "independent of how requests are batched)")


def installed_vllm() -> str:
    import importlib
    from importlib import metadata

    import torch

    found = installed()
    if found is None:
        return vllm_report(None, [], torch.__version__, dict(os.environ))
    build, version = found
    try:
        importlib.import_module(build.kernels)
        kernels_error = None
    except (ImportError, OSError) as e:  # e.g. libcudart.so.13: cannot open shared object file
        kernels_error = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return vllm_report(version, metadata.requires(build.distribution) or [], torch.__version__, dict(os.environ),
                       kernels_error)


def check_gpu_image(device, compiles: bool) -> str:
    """Every check for a GPU pod, in the order a failure is cheapest to find; returns the lines to
    log (network, vLLM). `compiles`: the run reaches Triton (compiled layers or flex attention)."""
    import torch

    driver_supports(torch.version.cuda, driver_cuda_version())
    if compiles:
        c_compiler()
        triton_compiles(device)
    return f"{network().describe()}\n{installed_vllm()}"


def main() -> int:
    import torch

    from training.contract.errors import report

    try:
        print(f"C compiler: {c_compiler()}")
        if torch.cuda.is_available():
            print(check_gpu_image(torch.device("cuda", 0), compiles=True))
            print(f"CUDA {torch.version.cuda}, driver {driver_cuda_version()}, "
                  f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
        else:
            print(network().describe())
            print(installed_vllm())
            print("no GPU: the compiler, network and vLLM checks only")
    except ConfigError as e:
        return report(e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
