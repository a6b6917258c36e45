"""Elastic events: SIGUSR1 (the HyperPod elastic agent's graceful stop) and SIGTERM (torchrun
restarting the worker group, Kubernetes deleting the pod) only set a flag; the training loop asks
every rank at the same step whether any rank saw one, then saves and exits 0.

When `hyperpod_elastic_agent` is installed its SIGUSR1 handler still runs (ours chains to it). The
agreement is the same MAX all-reduce that its `elastic_event_detected()` performs in
HYPERPOD_SIGNAL_COORDINATION=distributed mode, so one code path serves HyperPod, torchrun,
Kubeflow and local runs, with or without the agent.
"""

from __future__ import annotations

import ctypes
import signal
import sys

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


class ElasticStop:
    def __init__(self):
        self.signal_name: str | None = None
        try:  # importing it installs the agent's own SIGUSR1 handler, which ours then chains to
            import hyperpod_elastic_agent.elastic_event_handler  # noqa: F401
        except ImportError:
            pass
        for sig in STOP_SIGNALS:
            previous = signal.getsignal(sig)
            signal.signal(sig, self._handler(previous))

    def _handler(self, previous):
        def handle(signum, frame):
            self.signal_name = self.signal_name or signal.Signals(signum).name
            if callable(previous):
                previous(signum, frame)
        return handle

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def agreed(self, device: torch.device) -> bool:
        """True on every rank if any rank received a stop signal (a collective: call it on all ranks)."""
        flag = torch.tensor([1.0 if self.requested else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def die_with_parent() -> None:
    """If the launcher agent is SIGKILLed, take this worker down too instead of training on as an
    orphan (torchrun starts workers in their own sessions, so nothing else reaches them)."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
