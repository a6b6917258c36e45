"""A node's new policies, from its first training rank to its rollout processes (training.rl.rollout_ranks),
over a process group of their own: NCCL from device to device on GPUs, gloo on CPU. The rollout processes
are not in torchrun's world, so the group forms on a store of the training rank's (a free loopback port):
rank 0 the training rank, 1..k its rollout processes.

A send never waits for the rollout processes: its broadcasts are queued (the training rank goes on with
its updates) and a thread in each rollout process takes them as they come, while the process generates,
then keeps them in host memory until the rollout they draw (a GPU's memory holds the engine and the
model, not s policies). The sender keeps each sent tensor until its broadcast is done: on GPUs, a copy
of the trainable parameters on the training rank's device, for as long as the NCCL broadcast takes."""

from __future__ import annotations

import dataclasses
import datetime
import threading

import torch
import torch.distributed as dist

HOST = "127.0.0.1"
# For the group to form and for a policy to be taken: a rollout process builds its engine between joining
# the group and taking the first policy (vLLM's start, minutes for a large model on a GPU)
TIMEOUT = datetime.timedelta(minutes=30)
FORM_POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class ChannelAddress:
    """Where a rollout process joins its training rank's channel (pickled to it)."""

    port: int
    size: int  # the training rank and its rollout processes
    backend: str  # "nccl" or "gloo"


def _group(store, rank: int, address: ChannelAddress):
    if address.backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = TIMEOUT
        return dist.ProcessGroupNCCL(store, rank, address.size, options)
    options = dist.ProcessGroupGloo._Options()
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=HOST)]  # loopback: the node's own processes
    options._timeout = TIMEOUT
    return dist.ProcessGroupGloo(store, rank, address.size, options)


def _broadcast(group, tensor: torch.Tensor):
    options = dist.BroadcastOptions()
    options.rootRank = 0
    return group.broadcast([tensor], options)


class PolicySender:
    """The training rank's end. The group forms in a thread while the rollout processes start, so the
    training rank's own start does not wait for theirs."""

    def __init__(self, receivers: int, on_gpu: bool):
        self.store = dist.TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
        self.address = ChannelAddress(self.store.port, receivers + 1, "nccl" if on_gpu else "gloo")
        self.group = None
        self.in_flight: list[tuple[object, torch.Tensor]] = []  # (broadcast, its tensor) not known done
        self.forming = threading.Thread(target=self._form, daemon=True, name="policy-channel")
        self.forming.start()

    def _form(self) -> None:
        self.group = _group(self.store, 0, self.address)

    def wait_formed(self, receivers_alive) -> None:
        """Until the group has formed; `receivers_alive()` raises when a rollout process died first."""
        while self.forming.is_alive():
            receivers_alive()
            self.forming.join(FORM_POLL_S)
        if self.group is None:
            raise RuntimeError("the rollout processes' policy channel did not form: their log lines are above")

    def send(self, weights: dict[str, torch.Tensor]) -> list[tuple[str, tuple, torch.dtype]]:
        """Queue `weights`' broadcasts (tensors the sender owns: on the device on GPUs); returns their
        announcement, which each rollout process's `PolicyReceiver` is given to take them by."""
        self.in_flight = [(work, t) for work, t in self.in_flight if not work.is_completed()]
        for tensor in weights.values():
            self.in_flight.append((_broadcast(self.group, tensor), tensor))
        return [(name, tuple(t.shape), t.dtype) for name, t in weights.items()]

    def close(self) -> None:
        """After the rollout processes ended: the broadcasts they never joined are dropped."""
        self.in_flight = []
        if self.group is not None:
            self.group.abort()
        self.group = None


class PolicyReceiver:
    """A rollout process's end, joined as its first act (before its heavy imports and its engine). Its
    thread takes each policy announced in `announcements` (the sender's order) as it comes."""

    def __init__(self, address: ChannelAddress, rank: int, device: torch.device, announcements):
        store = dist.TCPStore(HOST, address.port, is_master=False, timeout=TIMEOUT)
        self.group, self.device, self.announcements = _group(store, rank, address), device, announcements
        self.policies: dict[int, dict[str, torch.Tensor]] = {}
        self.failure: str | None = None
        self.arrived = threading.Condition()
        threading.Thread(target=self._take, daemon=True, name="policy-receiver").start()

    def _take(self) -> None:
        try:
            while True:
                step, announced = self.announcements.get()
                weights = {name: torch.empty(shape, dtype=dtype, device=self.device) for name, shape, dtype in announced}
                for work in [_broadcast(self.group, t) for t in weights.values()]:
                    work.wait()
                weights = {name: t.to("cpu") for name, t in weights.items()}  # on CPU: as they are
                with self.arrived:
                    self.policies[step] = weights
                    self.arrived.notify_all()
        except Exception as e:  # noqa: BLE001 - the rollout that needs the policy raises it
            with self.arrived:
                self.failure = f"{type(e).__name__}: {e}"
                self.arrived.notify_all()

    def policy(self, step: int) -> dict[str, torch.Tensor]:
        """The policy after `step` steps, once it has come; those of earlier steps are dropped (the
        rollouts come in step order)."""
        with self.arrived:
            self.arrived.wait_for(lambda: step in self.policies or self.failure is not None)
            if step not in self.policies:
                raise RuntimeError(f"the policy after step {step} did not come: {self.failure}")
            for older in [p for p in self.policies if p < step]:
                del self.policies[older]
            return self.policies[step]
