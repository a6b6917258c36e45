"""MLflow tracking against a real `mlflow server` on loopback (SQLite backend), through a 2 -> 3 -> 1
rehearsal whose tracking server goes down in the middle: one MLflow run for the whole training run,
every committed step's metrics in it exactly once, the resizes as events, and no step of training
lost to the outage."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT, losses, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 18
TRACE = "[{step:0,nodes:2},{step:6,nodes:3},{step:12,nodes:1}]"


def test_one_mlflow_run_across_resizes_and_an_outage(mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "run"
    rehearsal = subprocess.Popen(
        [sys.executable, str(ROOT / "launcher.py"), "recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true",
         "action=rehearse", f"local.trace={TRACE}", f"local.run_dir={run_dir}", "local.compare=false",
         f"recipes.training_config.training_args.max_steps={STEPS}",
         f"recipes.training_config.logging.mlflow.tracking_uri={mlflow_server.uri}",
         "recipes.training_config.logging.mlflow.experiment=tiny", f"output_dir={tmp_path / 'out'}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        step = lambda: max(losses(run_dir), default=0)  # noqa: E731
        wait_for(lambda: step() >= 3, timeout=240, interval=0.1)
        mlflow_server.stop()  # the tracking server goes down at step 3 ...
        wait_for(lambda: step() >= 9, timeout=240, interval=0.1)
        mlflow_server.start()  # ... and comes back after the 2 -> 3 resize at step 6
        out, _ = rehearsal.communicate(timeout=400)
    finally:
        if rehearsal.poll() is None:
            rehearsal.kill()
    assert rehearsal.returncode == 0, out[-3000:]
    assert sorted(losses(run_dir)) == list(range(1, STEPS + 1))  # training lost nothing to the outage
    log = (run_dir / "torchrun.log").read_text()
    assert "warning: MLflow tracking at" in log

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1  # one training run, one MLflow run, whatever the restarts
    run_id = runs[0].info.run_id
    assert (run_dir / "mlflow_run_id").read_text() == run_id
    loss = client.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in loss) == list(range(1, STEPS + 1))  # every committed step exactly once
    committed = losses(run_dir)
    assert all(m.value == pytest.approx(committed[m.step]) for m in loss)
    resumes = client.get_metric_history(run_id, "event/resume")
    assert sorted(int(m.value) for m in resumes) == [1, 3]  # the resizes, as events: to 3 then 1 processes
    params = runs[0].data.params
    assert params["training_config.training_args.max_steps"] == str(STEPS)
    assert params["training_config.model_config.architecture.model_type"] == "llama"


def test_a_file_store_tracks_and_the_run_status_follows_the_job(tmp_path, capfd):
    """The docs' `file:` example (docs/cluster.md) works with the pinned MLflow (its file store is opt-in), a stop
    leaves the run KILLED, a restart sets it RUNNING again and the end FINISHED; nothing prints a
    thread's traceback."""
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from training.tracking import Tracker

    uri = f"file:{tmp_path / 'mlruns'}"
    settings = SimpleNamespace(tracking_uri=uri, experiment="tiny", run_name=None)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = Tracker(settings, run_dir, True, {"a": 1}, launch="1")
    first.log({"step": 1, "loss": 2.5, "time": 1.0})
    first.close("KILLED")
    client = MlflowClient(tracking_uri=uri)
    run_id = (run_dir / "mlflow_run_id").read_text()
    assert client.get_run(run_id).info.status == "KILLED"
    second = Tracker(settings, run_dir, True, {"a": 1}, launch="2")
    second.log({"step": 2, "loss": 2.0, "time": 2.0})
    wait_for(lambda: client.get_run(run_id).info.status == "RUNNING", timeout=30)
    second.close("FINISHED")
    assert client.get_run(run_id).info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(run_id, "loss")] == [2.5, 2.0]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("outage_at", ["create_run", "log_batch"])
def test_an_outage_while_the_run_is_opened_makes_no_second_run(mlflow_server, tmp_path, outage_at):
    """The server dies just after it created the run (its answer lost) or while the parameters are
    logged: the retries find the same run and complete its parameters."""
    import threading
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from training import tracking

    real = getattr(MlflowClient, outage_at)
    hit = []

    def dies_after(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        if not hit and threading.current_thread().name == "mlflow":
            hit.append(True)
            mlflow_server.stop()
            threading.Timer(1.0, mlflow_server.start).start()
            raise ConnectionError("the server went away before it answered")
        return result

    config = {f"p{i}": i for i in range(150)}  # two parameter batches
    settings = SimpleNamespace(tracking_uri=mlflow_server.uri, experiment="tiny", run_name=None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MlflowClient, outage_at, dies_after)
        patch.setattr(tracking, "RETRY_S", 0.2)
        tracker = tracking.Tracker(settings, tmp_path, True, config, launch="1")
        tracker.log({"step": 1, "loss": 2.5, "time": 1.0})
        tracker.close("FINISHED")
        tracker._thread.join(120)
    assert hit
    client = MlflowClient(tracking_uri=mlflow_server.uri)
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert [r.info.run_id for r in runs] == [(tmp_path / "mlflow_run_id").read_text()]
    assert runs[0].data.params == {k: str(v) for k, v in config.items()}
    assert [m.value for m in client.get_metric_history(runs[0].info.run_id, "loss")] == [2.5]
