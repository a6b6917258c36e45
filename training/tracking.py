"""MLflow tracking of one training run across every restart and resize (rank 0 only).

One MLflow run per training run: its id is kept beside the checkpoints (`<run dir>/mlflow_run_id`),
so a restart at any size appends to the same run, and a resize shows as one `resume` event on it,
never as a new run. Logged: the resolved config as parameters (flattened keys), every step's
metrics, eval metrics, lifecycle events (start, resume, checkpoint, stop, export) as metrics named
`event/<name>` at their step plus the last one as a tag, and the Hugging Face export's paths as tags.

Tracking never stops or slows training: records go through a queue to a sender thread, and a
tracking server that is down or refuses writes costs one warning; the sender keeps the records in
order and retries, and a restart first logs what `metrics.jsonl` holds beyond the run's last logged
step, so a step lost in an outage reaches MLflow exactly once when the server is back.
Works with any MLflow tracking URI: a local `file:` store, an `http(s)://` server, or a SageMaker
managed MLflow tracking server ARN (`arn:aws:sagemaker:...`, through the `sagemaker-mlflow` plugin).
The run's status follows the job: RUNNING while a launch trains, KILLED after a stop (a resize or
a restart sets it RUNNING again), FINISHED at the end, FAILED after an error.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
import uuid
from pathlib import Path

from training.contract.records import read_records

RUN_ID_FILE = "mlflow_run_id"
CREATOR_TAG = "creator"  # names the Tracker that created the run: finds it again when the answer to its creation was lost
STEP_METRIC = "loss"  # the metric whose last logged step says where MLflow's copy of the run ends
PARAM_VALUE_LIMIT = 500  # MLflow rejects longer parameter values
RETRY_S = 2.0
FLUSH_AT_EXIT_S = 10.0


def _flatten(data, prefix: str = "") -> dict[str, str]:
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): json.dumps(data)[:PARAM_VALUE_LIMIT] if not isinstance(data, str) else data[:PARAM_VALUE_LIMIT]}


def _numbers(record: dict) -> dict[str, float]:
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "time")}


class Tracker:
    """Does nothing unless `tracking_uri` is set (and only on rank 0)."""

    def __init__(self, settings, run_dir: Path, enabled: bool, config: dict, launch: str):
        self._queue: queue.Queue | None = None
        if not (enabled and settings is not None and settings.tracking_uri):
            return
        try:
            import mlflow  # noqa: F401
        except ImportError:
            from training.contract.errors import ConfigError

            raise ConfigError(f"training_config.logging.mlflow.tracking_uri={settings.tracking_uri!r} but mlflow is not "
                              f"installed: pip install mlflow-skinny (the training image has it), or unset it") from None
        self.settings, self.run_dir, self.config, self.launch = settings, Path(run_dir), config, launch
        self._warned, self._closing, self._status = False, False, "FINISHED"
        self._creator = uuid.uuid4().hex
        if settings.tracking_uri.startswith("file:"):  # MLflow 3 keeps its file store only on request
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._send_forever, name="mlflow", daemon=True)
        self._thread.start()

    # --- called by the trainer -------------------------------------------------------------------
    def log(self, record: dict) -> None:
        """A metrics record (a step or an evaluation) or an event (it has an `event` key)."""
        if self._queue is not None:
            self._queue.put(dict(record))

    def close(self, status: str = "FINISHED") -> None:
        """Send what is queued and set the run's status (FINISHED, KILLED or FAILED), waiting at most
        FLUSH_AT_EXIT_S (what is left is in metrics.jsonl and the next start sends it)."""
        if self._queue is not None:
            self._status = status
            self._queue.put(None)
            self._thread.join(FLUSH_AT_EXIT_S)

    # --- the sender thread -----------------------------------------------------------------------
    def _warn(self, error: BaseException) -> None:
        if not self._warned:
            self._warned = True
            print(f"warning: MLflow tracking at {self.settings.tracking_uri} failed ({type(error).__name__}: "
                  f"{str(error).strip().splitlines()[0][:200] if str(error).strip() else ''}); training goes on, every "
                  f"record stays in metrics.jsonl and is sent when the server answers again", file=sys.stderr, flush=True)

    def _retry(self, action):
        """Run `action` until it succeeds (the server may be down for a while); None once closing."""
        while True:
            try:
                result = action()
                self._warned = False
                return result
            except Exception as e:  # noqa: BLE001 - any failure of the tracking server
                self._warn(e)
                if self._closing:
                    return None
                time.sleep(RETRY_S)

    def _send_forever(self) -> None:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # we retry, without blocking training
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        from mlflow.tracking import MlflowClient

        self.client = self._retry(lambda: MlflowClient(tracking_uri=self.settings.tracking_uri))
        self.run_id = self.client and self._retry(self._open_run)
        if self.run_id is None:
            return
        pending: list[dict] = self._retry(self._backlog) or []
        while True:
            record = self._queue.get()
            if record is None:
                self._closing = True
            else:
                pending.append(record)
            while not self._queue.empty() and len(pending) < 1000:
                more = self._queue.get()
                if more is None:
                    self._closing = True
                else:
                    pending.append(more)
            if pending and self._retry(lambda: self._send(pending)) is not None:
                pending = []
            if self._closing:
                self._retry(lambda: self.client.set_terminated(self.run_id, self._status))
                return

    def _open_run(self) -> str:
        """This training run's MLflow run: the one recorded beside the checkpoints, or a new one.
        Retried whole after any failure, so every step is safe to repeat: the run created by an
        attempt whose answer was lost is found again by its creator tag, and only missing
        parameters are logged (MLflow refuses a parameter logged twice with another value)."""
        id_file = self.run_dir / RUN_ID_FILE
        if id_file.exists():
            run_id = id_file.read_text().strip()
            self.client.update_run(run_id, status="RUNNING")  # a restart: the run goes on
        else:
            name = self.settings.experiment
            experiment = self.client.get_experiment_by_name(name)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
            mine = self.client.search_runs([experiment_id], f"tags.{CREATOR_TAG} = '{self._creator}'", max_results=1)
            run = mine[0] if mine else self.client.create_run(
                experiment_id, run_name=self.settings.run_name or self.run_dir.name, tags={CREATOR_TAG: self._creator})
            run_id = run.info.run_id
            tmp = id_file.with_name(id_file.name + ".tmp")
            tmp.write_text(run_id)
            os.replace(tmp, id_file)
        from mlflow.entities import Param

        logged = self.client.get_run(run_id).data.params
        items = [Param(k, v) for k, v in _flatten(self.config).items() if k not in logged]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(run_id, params=items[i:i + 100])
        return run_id

    def _backlog(self) -> list[dict]:
        """The records of earlier launches that MLflow lacks (an outage before a restart): everything in
        metrics.jsonl newer than the last step MLflow holds, each step once (its committed record);
        this launch's own records arrive live."""
        history = self.client.get_metric_history(self.run_id, STEP_METRIC)
        last_ms = max((m.timestamp for m in history), default=0)
        backlog: dict = {}
        for record in read_records(self.run_dir):
            if record.get("launch") == self.launch or int(record.get("time", 0) * 1000) <= last_ms:
                continue
            key = ("event", len(backlog)) if "event" in record else ("step", record.get("step"), "eval_loss" in record)
            backlog.pop(key, None)  # a step run twice (after a failure): its last record is the committed one
            backlog[key] = record
        return sorted(backlog.values(), key=lambda r: r.get("time", 0))

    def _send(self, records: list[dict]) -> bool:
        from mlflow.entities import Metric, RunTag

        metrics, tags = [], []
        for r in records:
            stamp, step = int(r.get("time", time.time()) * 1000), int(r.get("step", 0))
            if "event" in r:
                name = r["event"]
                value = r.get("world_size", r.get("step", 0))
                metrics.append(Metric(f"event/{name}", float(value or 0), stamp, step))
                tags.append(RunTag("last_event", json.dumps({k: v for k, v in r.items() if k != "launch"})[:5000]))
                if name == "export":
                    tags.append(RunTag("hf_export", ", ".join(r.get("dirs", []))))
            else:
                metrics += [Metric(k, v, stamp, step) for k, v in _numbers(r).items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000], tags=tags if i == 0 else [])
        return True
