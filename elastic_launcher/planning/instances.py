"""Instance types: what one node brings, and the pod resources requested for it.

Requests leave room for the kubelet the way the HyperPod CLI computes it, so a pod requesting a
whole node still schedules. Accelerator and EFA requests always equal their limits.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from training.contract.errors import ConfigError


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_gib: int
    gpus: int = 0
    neuron_devices: int = 0
    efa: int = 0
    gpu_memory_gib: float = 0  # per accelerator, as the driver reports it

    @property
    def accelerator_key(self) -> str | None:
        if self.neuron_devices:
            return "aws.amazon.com/neurondevice"
        return "nvidia.com/gpu" if self.gpus else None

    @property
    def devices_per_node(self) -> int:
        """Training processes per node: one per accelerator, one on CPU-only instances."""
        return self.neuron_devices or self.gpus or 1

    def resources(self) -> dict[str, dict[str, str | int]]:
        cpu = int(self.vcpu - _reserved_cpu(self.vcpu))
        memory = f"{int(self.memory_gib - _reserved_memory_gib(self.memory_gib))}Gi"
        requests: dict[str, str | int] = {"cpu": str(cpu), "memory": memory}
        limits: dict[str, str | int] = {"memory": memory}
        for key, count in ((self.accelerator_key, self.neuron_devices or self.gpus),
                           ("vpc.amazonaws.com/efa", self.efa)):
            if key and count:
                requests[key] = limits[key] = str(count)  # quantities are strings in the API
        return {"requests": requests, "limits": limits}


def _tiered(total: float, tiers: list[tuple[float, float]], base: float) -> float:
    reserved, left = base, total
    for size, rate in tiers:
        take = min(left, size)
        reserved += take * rate
        left -= take
    return reserved


def _reserved_cpu(vcpu: int) -> float:
    return _tiered(vcpu, [(1, 0.30), (1, 0.15), (2, 0.10), (float("inf"), 0.06)], 0.1)


def _reserved_memory_gib(gib: int) -> float:
    return _tiered(gib, [(4, 0.30), (4, 0.25), (8, 0.20), (112, 0.17), (float("inf"), 0.07)], 0.5)


def _family(prefix: str, sizes: dict[str, tuple[int, int, int, int]], device_gib: float = 0,
            neuron: bool = False) -> list[InstanceType]:
    out = []
    for size, (vcpu, mem, accel, efa) in sizes.items():
        name = f"ml.{prefix}.{size}"
        out.append(InstanceType(name, vcpu, mem, efa=efa, gpu_memory_gib=device_gib if accel else 0,
                                **({"neuron_devices": accel} if neuron else {"gpus": accel})))
    return out


_G5_G6 = {"xlarge": (4, 16, 1, 0), "2xlarge": (8, 32, 1, 0), "4xlarge": (16, 64, 1, 0), "8xlarge": (32, 128, 1, 1),
          "12xlarge": (48, 192, 4, 1), "16xlarge": (64, 256, 1, 1), "24xlarge": (96, 384, 4, 1),
          "48xlarge": (192, 768, 8, 1)}
_G6E = {"xlarge": (4, 32, 1, 0), "2xlarge": (8, 64, 1, 0), "4xlarge": (16, 128, 1, 0), "8xlarge": (32, 256, 1, 1),
        "12xlarge": (48, 384, 4, 1), "16xlarge": (64, 512, 1, 1), "24xlarge": (96, 768, 4, 2),
        "48xlarge": (192, 1536, 8, 4)}

# vCPU, memory GiB, accelerators, EFA interfaces (SageMaker HyperPod instance specs), and the memory
# of one accelerator in GiB (nvidia-smi's total: A100 40/80 GB, A10G, L4, L40S, H100, H200, B200).
INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in [
        *_family("p4d", {"24xlarge": (96, 1152, 8, 4)}, 40.0),
        *_family("p4de", {"24xlarge": (96, 1152, 8, 4)}, 80.0),
        *_family("p5", {"4xlarge": (16, 256, 1, 4), "48xlarge": (192, 2048, 8, 32)}, 79.6),
        *_family("p5e", {"48xlarge": (192, 2048, 8, 32)}, 140.4),
        *_family("p5en", {"48xlarge": (192, 2048, 8, 16)}, 140.4),
        *_family("p6-b200", {"48xlarge": (192, 2048, 8, 8)}, 178.4),
        *_family("g5", _G5_G6, 22.5),
        *_family("g6", _G5_G6, 22.5),
        *_family("g6e", _G6E, 45.0),
        *_family("trn1", {"32xlarge": (128, 512, 16, 8)}, neuron=True),
        *_family("trn1n", {"32xlarge": (128, 512, 16, 16)}, neuron=True),
        *_family("trn2", {"3xlarge": (12, 128, 1, 1), "48xlarge": (192, 2048, 16, 16)}, neuron=True),
        *_family("m5", {"2xlarge": (8, 32, 0, 0), "8xlarge": (32, 128, 0, 0)}),
        *_family("c5", {"4xlarge": (16, 32, 0, 0), "9xlarge": (36, 72, 0, 0)}),
    ]
}


def lookup(name: str, key: str = "recipes.instance_type") -> InstanceType:
    if name in INSTANCE_TYPES:
        return INSTANCE_TYPES[name]
    if f"ml.{name}" in INSTANCE_TYPES:  # plain EKS spelling: accept it, render HyperPod's `ml.` label
        return INSTANCE_TYPES[f"ml.{name}"]
    close = difflib.get_close_matches(name, INSTANCE_TYPES, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else "see elastic_launcher/planning/instances.py"
    raise ConfigError(f"unknown instance type {key}={name!r}: {hint}")
