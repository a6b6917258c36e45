"""Resizes in place under the HyperPod agent's in-process restart (`hyperpodrun --inprocess-restart`).

The agent starts the workers once, before the operator has ranked the pods, and never kills them
on a healthy node. Its `/stop` reaches the workers as a fault notification (not a
signal): every worker ends or abandons its step, saves, and waits at the agent's barrier. Its
`/start` releases the barrier with this rank's new RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT,
which become the environment the next world size starts from (`training.runtime.topology`).

A worker that cannot get back to the barrier (hung, or failing on the way) is the agent's to
handle: after `--inprocess-timeout` it kills its node's workers and starts fresh ones, which resume
from the newest complete checkpoint like any process restart. Uses the agent's own client
(`hyperpod_elastic_agent.TrainingManager().InProcessRestart`).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from training.contract.config_files import IN_PLACE_ENV
from training.runtime.elastic import FAULT, ElasticStop, under_agent


def in_place_requested() -> bool:
    """Whether the agent runs this worker for in-process restarts (the job's env says so): the rank it
    was started with, if any, is not the next start's."""
    return under_agent() and os.environ.get(IN_PLACE_ENV) == "1"


class AgentBarrier:
    """This worker's side of the agent's barrier, for the life of the process."""

    def __init__(self, stop: ElasticStop):
        from hyperpod_elastic_agent import TrainingManager

        self.stop = stop
        stop.in_place = True
        self.client = TrainingManager().InProcessRestart
        self.starts = 0  # how many world sizes this process has trained at
        threading.Thread(target=self._receive_faults, name="agent-faults", daemon=True).start()

    def _receive_faults(self) -> None:
        while True:
            self.client.hyperpod_wait_fault()
            self.stop.receive(FAULT)

    def wait_for_start(self) -> float:
        """Block at the barrier until the operator's /start; returns when it came (time.time()).
        The rank info it carries becomes this process's environment."""
        self.stop.wait_at_barrier()
        _, payload = self.client.hyperpod_barrier()
        released = time.time()
        os.environ.update({k: str(v) for k, v in payload["worker_envs"].items()})
        self.stop.start_size()
        self.client.hyperpod_past_rcb_barrier()
        self.starts += 1
        if os.environ.get("LOCAL_RANK") == "0":
            kept = "this process kept its imports and data" if self.starts > 1 else "a fresh process"
            print(f"in place: start {self.starts} at world size {os.environ['WORLD_SIZE']} ({kept})",
                  file=sys.stderr, flush=True)
        return released
