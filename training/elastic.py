"""Elastic events: SIGUSR1 (the HyperPod elastic agent's graceful stop) and SIGTERM (torchrun
restarting the worker group, Kubernetes deleting the pod).

Installed first thing in the worker, before torch is imported (`training/__main__.py`), so no
signal can land before it. The signals are blocked in every thread and received by one waiting
thread: unlike a Python signal handler, that thread runs even while the main thread is blocked
inside a collective or a long import.
- While training, a signal only sets a flag; the loop asks every rank at the same step whether any
  rank saw one, then saves and exits 0.
- Before the loop (start-up, resume) or after it, there is no consistent state to save yet or any
  more: the process exits 0 at once, leaving no partial checkpoint.

When `hyperpod_elastic_agent` is installed its SIGUSR1 handler still runs (ours calls it). The
agreement is the same MAX all-reduce that its `elastic_event_detected()` performs in
HYPERPOD_SIGNAL_COORDINATION=distributed mode, so one code path serves HyperPod, torchrun,
Kubeflow and local runs, with or without the agent. This module must not import torch.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

STOP_SIGNALS = {signal.SIGUSR1, signal.SIGTERM}


class ElasticStop:
    def __init__(self):
        self.signal_name: str | None = None
        self.training = False  # inside the loop: a signal means "save at the agreed step, then exit"
        self._agent_handler = None
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # inherited by every thread started later
        threading.Thread(target=self._receive, name="stop-signals", daemon=True).start()

    def chain_agent_handler(self) -> None:
        """Importing the HyperPod agent installs its own SIGUSR1 handler; ours calls it."""
        try:
            import hyperpod_elastic_agent.elastic_event_handler  # noqa: F401
        except ImportError:
            return
        handler = signal.getsignal(signal.SIGUSR1)
        self._agent_handler = handler if callable(handler) else None

    def _receive(self) -> None:
        while True:
            signum = signal.sigwait(STOP_SIGNALS)
            name = signal.Signals(signum).name
            if not self.training:
                print(f"{name} outside the training loop: exiting without a checkpoint", file=sys.stderr, flush=True)
                os._exit(0)
            self.signal_name = self.signal_name or name
            if self._agent_handler is not None and signum == signal.SIGUSR1:
                self._agent_handler(signum, None)

    @property
    def requested(self) -> bool:
        return self.signal_name is not None


def die_with_parent() -> None:
    """If the launcher agent dies (even SIGKILLed), take this worker down too instead of training on
    as an orphan: torchrun starts workers in their own sessions, so nothing else reaches them."""
    if not sys.platform.startswith("linux"):
        return
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the line above ran
        os._exit(1)
