"""Elastic events: SIGUSR1 (the HyperPod elastic agent's graceful stop) and SIGTERM (torchrun
restarting the worker group, Kubernetes deleting the pod).

Installed first thing in the worker, before torch is imported (`training/__main__.py`), so no
signal can land before it. The signals are blocked in every thread and received by one waiting
thread: unlike a Python signal handler, that thread runs even while the main thread is blocked
inside a collective or a long import. What a signal does depends on the phase:

- `training`: it only sets a flag; the loop asks every rank at the same step whether any rank saw
  one, then saves and exits.
- `starting` (start-up, resume) and `finishing` (after the loop: final wait, export): there is no
  consistent state to save, so the rank exits 0 at once, leaving no partial checkpoint. Its peers
  may be waiting for it in a collective, so it first announces the stop in the job's rendezvous
  store, where a watcher thread on every rank sees it within a fraction of a second and ends that
  rank too. A signal that arrives before the store exists waits (bounded) for it.
- `waiting`: the stop is saved; the rank waits for its own signal (below) and exits 0 on it.
- In place (`training.runtime.in_place`), the agent's `/stop` is a fault notification handled like
  a signal; after the saved stop the rank is `between` sizes, then `idle` at the agent's barrier,
  where a notification has nothing left to stop and a signal (the pod goes) ends the process.

Exit codes, as the HyperPod agent reads them (its state machine, `plr_hyperpod_elastic_agent.py`):
workers that exit 0 while the agent is RUNNING make it report `completed`; a non-zero exit makes it
report `faulted`; workers that exit after a `/stop` leave it `ready` for the next `/start`. So under
the agent a rank that stops because a *peer* was signalled (the operator's `/stop` calls reach the
pods seconds apart) does not exit 0 at once: it waits up to $ELASTIC_STOP_WAIT_S for its own agent's
signal and exits 0 on it; if none comes it exits 3, which the agent reports as a fault, never as a
completion. Only a run that reached its last step exits 0 unasked. Under torchrun (no agent) a
peer's stop exits 0 at once: torchrun and the local driver read 0 as "stopped or done".

When `hyperpod_elastic_agent` is installed its SIGUSR1 handler still runs (ours calls it). The
agreement is the same MAX all-reduce that its `elastic_event_detected()` performs in
HYPERPOD_SIGNAL_COORDINATION=distributed mode. This module must not import torch.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

from training.contract.config_files import GRACEFUL_SHUTDOWN_TIMEOUT_S, STOP_WAIT_ENV

STOP_SIGNALS = {signal.SIGUSR1, signal.SIGTERM, signal.SIGINT}  # SIGINT: a local run's Ctrl-C
FAULT = "AGENT_STOP"  # in place, the agent's /stop arrives as a fault notification, not a signal
AGENT_SOCKET_ENV = "HYPERPOD_ELASTICAGENT_SOCKET_SERVER_PATH"  # set by hyperpodrun for its workers
NO_OWN_STOP_EXIT = 3  # a peer stopped, this node's agent never asked: a fault, not a completion
STOP_KEY, STOPPED_KEY = "elastic/stop", "elastic/stopped"  # in the job's rendezvous store
STORE_WAIT_S = 15.0  # how long a signal before the process group waits for the store to announce the stop
STORE_OP_TIMEOUT_S = 5.0  # one announcement or check; the store's host may be gone
POLL_S = 0.2


def stop_wait_s() -> float:
    """The policy's graceful timeout: how long a stop may take before the pod is killed, and so how
    long a worker whose peers stopped waits for its own stop signal."""
    return float(os.environ.get(STOP_WAIT_ENV, GRACEFUL_SHUTDOWN_TIMEOUT_S))


def finishing_fits(done: int, total: int, seconds: float, save_s: float, seconds_left: float) -> bool:
    """Whether a stopped step's remaining updates (`done` of `total` took `seconds`) and the stop's
    save (`save_s`, as the newest took) fit in what is left of the graceful timeout."""
    return seconds / done * (total - done) + save_s <= seconds_left


@contextmanager
def signal_mask_kept():
    """The calling thread's signal mask, restored after the block. Starting a child process may start
    multiprocessing's resource tracker, and CPython unblocks SIGINT and SIGTERM in the calling thread
    once the tracker is spawned (a reward pool's process, vLLM's start). The trainer keeps its stop
    signals blocked in every thread (ElasticStop handles them on a thread of its own): unblocked, a
    SIGTERM would kill the process instead of saving its checkpoint."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def under_agent() -> bool:
    return bool(os.environ.get(AGENT_SOCKET_ENV))


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")  # one write: ranks sharing a terminal do not interleave
    sys.stderr.flush()


class ElasticStop:
    def __init__(self):
        self.signal_name: str | None = None  # this rank's own stop signal
        self.signalled_at = 0.0  # its time.monotonic()
        self.phase = "starting"
        self._lock = threading.Lock()
        self._store = None
        self._rank, self._world_size = 0, 1
        self._store_ready = threading.Event()
        self._watching = True  # announcements are watched until every rank has agreed to train
        self._agent_handler = None
        self._watcher_started = False
        self.in_place = False  # set under the agent's in-process restart (training.runtime.in_place)
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

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def seconds_left(self) -> float:
        """Of this rank's stop's graceful timeout, what is left."""
        return stop_wait_s() - (time.monotonic() - self.signalled_at)

    # --- phases (called by the trainer's main thread) -------------------------------------------
    def attach_store(self, store, rank: int, world_size: int) -> None:
        """The job's rendezvous store, once the process group exists: announcements go through it, on
        a connection of their own. The main thread may be blocked inside a store call (creating a
        process group waits on the store for every rank); on its connection an announcement would
        wait behind that call for as long as the collective timeout."""
        from datetime import timedelta

        try:
            store = store.clone()
            store.set_timeout(timedelta(seconds=STORE_OP_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - a store that cannot open another connection: share its own
            pass
        self._store, self._rank, self._world_size = store, rank, world_size
        self._store_ready.set()
        if not self._watcher_started:  # one watcher for the process; it follows the store of each size
            self._watcher_started = True
            threading.Thread(target=self._watch, name="stop-watch", daemon=True).start()

    def wait_at_barrier(self) -> None:
        """In place, between two world sizes: nothing pending, no store; a signal now ends the process
        at once (nothing to save, no peer waits for it)."""
        with self._lock:
            self.signal_name, self.phase = None, "idle"
            self._store = None
            self._store_ready.clear()

    def start_size(self) -> None:
        """Released from the barrier: the next world size's start-up begins."""
        with self._lock:
            self.phase = "starting"
        self._watching = True

    def receive(self, name: str) -> None:
        """A stop that is no signal (the agent's fault notification in place), handled as one."""
        self._handle(name)

    def enter_training(self, agree) -> bool:
        """From now on a signal only sets the flag. `agree()` (a collective: did any rank see a
        signal?) runs while announcements are still watched, so a rank that left just before cannot
        leave its peers waiting in it. Returns whether the job stops before its first step."""
        with self._lock:
            self.phase = "training"
        stopping = agree()
        self._watching = False
        return stopping

    def enter_finishing(self) -> None:
        with self._lock:
            self.phase = "finishing"
        self._watching = True

    def exit_code_after_stop(self) -> int:
        """The exit code of a rank whose loop ended on an agreed stop (its checkpoint is saved). In
        place, the rank goes on to the agent's barrier once its own agent's stop has arrived (a
        barrier reached before it would have the agent start this rank again at the old size)."""
        with self._lock:
            if self.in_place:
                self.phase = "between"
            if self.signal_name is not None or not under_agent():
                return 0
            if not self.in_place:
                self.phase = "waiting"  # from here the signal thread exits 0 when this node's own stop arrives
        return self._await_own_signal("a peer stopped")

    def yield_to_stop(self) -> None:
        """Called when start-up or the final steps fail. A peer that stops leaves at once, so the
        collective this rank waits in may fail a moment before the watcher (which polls) sees the
        peer's announcement: wait that moment, and if a stop is under way, its thread ends this rank
        (as a stop, not a failure) and this never returns. Returns when no stop is under way."""
        if not self._watching or not self._store_ready.is_set():
            return
        deadline = time.monotonic() + 3 * POLL_S
        while time.monotonic() < deadline or self.phase == "waiting" or self.signal_name is not None:
            time.sleep(0.05)

    # --- the two threads ------------------------------------------------------------------------
    def _receive(self) -> None:
        while True:
            signum = signal.sigwait(STOP_SIGNALS)
            self._handle(signal.Signals(signum).name)

    def _handle(self, name: str) -> None:
        with self._lock:
            if self.signal_name is None:
                self.signal_name, self.signalled_at = name, time.monotonic()
            phase = self.phase
            if phase in ("starting", "finishing"):
                self.phase = "leaving"  # this rank announces its stop: its watcher has nothing to act on
        if phase == "leaving":
            return  # a second signal: the first one's announcement and exit are under way
        if phase == "training":
            if self._agent_handler is not None and name == "SIGUSR1":
                self._agent_handler(signal.SIGUSR1, None)
            return
        if phase in ("between", "idle") and name == FAULT:
            return  # in place, saved or at the barrier already: the notification has nothing left to stop
        if phase in ("waiting", "between", "idle"):
            os._exit(0)  # the stop's checkpoint is saved (or there is nothing to save): the process may go
        _say(f"{name} during {'start-up' if phase == 'starting' else 'the final steps'}: "
             f"exiting without a checkpoint")
        alone = int(os.environ.get("WORLD_SIZE", "1")) <= 1
        if not alone and self._store_ready.wait(STORE_WAIT_S):
            # Nothing is saved in these phases: the announcement must not keep this rank alive for long.
            threading.Timer(3 * STORE_OP_TIMEOUT_S, os._exit, (0,)).start()
            self._announce()
        os._exit(0)

    def _watch(self) -> None:
        dead = None
        while True:
            time.sleep(POLL_S)
            store = self._store
            if not self._watching or store is None or store is dead:
                continue
            try:
                seen = store.check([STOP_KEY])
            except Exception:  # noqa: BLE001 - the store's host is gone: its collectives fail on their own
                dead = store
                continue
            if seen and self._watching:  # this rank may be blocked in a collective with the one that left
                with self._lock:
                    if self.phase == "leaving":
                        continue
                    phase, self.phase = self.phase, "waiting"
                if not under_agent():
                    _say(f"a peer stopped during {'start-up' if phase == 'starting' else 'the final steps'}: "
                         f"exiting without a checkpoint")
                self._acknowledge()
                if not under_agent():
                    os._exit(0)
                os._exit(self._await_own_signal("a peer stopped during start-up or the final steps"))

    # --- helpers ----------------------------------------------------------------------------------
    def _announce(self) -> None:
        try:
            self._store.set(STOP_KEY, self.signal_name or "")
        except Exception:  # noqa: BLE001 - nobody left to tell
            return
        self._acknowledge()

    def _acknowledge(self) -> None:
        """Count this rank out, then stay until every rank has seen the announcement (bounded). A rank
        that left at once would break the collective its peers may be blocked in, and a peer whose
        collective fails before its watcher polls would report an error instead of a stop; rank 0
        may also host the store (HyperPod)."""
        try:
            self._store.add(STOPPED_KEY, 1)
            deadline = time.monotonic() + 5
            while self._store.add(STOPPED_KEY, 0) < self._world_size and time.monotonic() < deadline:
                time.sleep(0.05)
        except Exception:  # noqa: BLE001
            pass

    def _await_own_signal(self, why: str) -> int:
        timeout = stop_wait_s()
        _say(f"{why}: waiting up to {timeout:g}s for this node's own stop signal")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.in_place and self.signal_name is not None:
                return 0
            time.sleep(0.05)  # the signal thread exits 0 when it arrives
        _say(f"error: {why} but no stop signal reached this node within {STOP_WAIT_ENV}={timeout:g}s: exiting "
             f"{NO_OWN_STOP_EXIT} so its agent reports a fault (the job resumes from its newest checkpoint), "
             f"not a completion")
        return NO_OWN_STOP_EXIT


def exit_now(code: int) -> None:
    """End the process at once: no interpreter teardown of a large model, the distributed runtime or an
    engine's helpers (everything is saved and flushed), but multiprocessing's own exit work: its
    finalizers unlink the semaphores of the process's queues and pools, which its resource tracker
    would otherwise report as leaked at shutdown."""
    if "multiprocessing.util" in sys.modules:
        sys.modules["multiprocessing.util"]._run_finalizers(0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def die_with_parent(parent: int | None = None) -> None:
    """If the launcher agent dies (even SIGKILLed), take this worker down too instead of training on
    as an orphan: torchrun starts workers in their own sessions, so nothing else reaches them.
    `parent`: the pid this process must be the child of (default: whichever it has now)."""
    if not sys.platform.startswith("linux"):
        return
    expected = parent or os.getppid()
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != expected or os.getppid() == 1:  # the parent died before the line above ran
        os._exit(1)
