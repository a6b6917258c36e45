"""Checkpoint discovery with the HyperPod elastic agent: every local rank tells its node's agent
about each complete checkpoint, the agent publishes the newest one in `/status` as `progress`
(`progressCount` = step, `progressData` = path), and the operator hands that back in the next
`/start`, where a restarted worker can read it. The trainer's own choice stays the newest
checkpoint that verifies (`checkpoint.py`); the agent's view is checked against it and a
disagreement is said in one line.

Outside the agent (torchrun, local runs) this does nothing; a failing agent connection is one
warning and never stops training. Uses the agent's own client (`hyperpod_elastic_agent.ipc`).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from training.contract.checkpoint_dirs import COMPLETE, CORRUPT_SUFFIX, step_of
from training.runtime.elastic import under_agent

ASK_TIMEOUT_S = 10.0  # the client's own request has no timeout


class AgentProgress:
    def __init__(self, checkpoints: str, local_world_size: int):
        self._client = self._type = None
        if not under_agent():
            return
        try:
            from hyperpod_elastic_agent.checkpoint_discovery import CheckpointType
            from hyperpod_elastic_agent.ipc import CheckpointDiscoverySocketClient

            # The prefix names the run: the agent keeps progress per prefix across restarts.
            self._client = CheckpointDiscoverySocketClient(checkpoints,
                                                           num_model_checkpoints=local_world_size)
            self._type = CheckpointType.MODEL_CHECKPOINT
        except Exception as e:  # noqa: BLE001 - progress reporting is a courtesy, never a reason to stop
            self._give_up("connect", e)

    def _give_up(self, what: str, error: BaseException) -> None:
        print(f"warning: cannot {what} the HyperPod agent's checkpoint discovery ({type(error).__name__}: "
              f"{error}); training goes on, /status will not show progress", file=sys.stderr, flush=True)
        self._client = None

    def restart_point(self) -> str | None:
        """The checkpoint path the agent would restart from (the `progress` of its last `/start`)."""
        if self._client is None:
            return None
        answer: list = []
        asker = threading.Thread(target=lambda: answer.append(self._client.get_latest_checkpoint_path()), daemon=True)
        asker.start()
        asker.join(ASK_TIMEOUT_S)
        if not answer:
            self._give_up("ask", TimeoutError(f"no answer within {ASK_TIMEOUT_S:g}s"))
            return None
        return answer[0]

    def report(self, step: int, path: str) -> None:
        """Checkpoint `step` is complete at `path` (a directory or an S3 uri)."""
        if self._client is None:
            return
        try:
            self._client.update(step, path, self._type)
        except Exception as e:  # noqa: BLE001
            self._give_up("report to", e)


def disagreement(agent_path: str | None, resumed: str | None) -> str | None:
    """Why the agent's restart point is not the checkpoint this restart resumed from (None: agreed,
    or the agent named none). Both are directories, or S3 uris of checkpoints in a bucket."""
    if not agent_path or agent_path == resumed:
        return None
    here = resumed.rsplit("/", 1)[-1] if resumed is not None else "no checkpoint (starting afresh)"
    if agent_path.startswith("s3://"):
        return f"the agent's progress names {agent_path}, which is not the newest checkpoint that verifies: resuming from {here}"
    named = Path(agent_path)
    if resumed is not None and not resumed.startswith("s3://") and named.resolve() == Path(resumed).resolve():
        return None
    if named.with_name(named.name + CORRUPT_SUFFIX).exists():
        why = "it failed verification and was set aside"
    elif not named.exists():
        why = "it does not exist here (another volume?)"
    elif not (named / COMPLETE).exists():
        why = "it has no COMPLETE marker"
    elif resumed is not None and step_of(named) < step_of(Path(resumed)):
        why = "a newer one completed after the agent's last report"
    else:
        why = "it is not the newest checkpoint that verifies"
    return f"the agent's progress names {agent_path}, but {why}: resuming from {here}"
