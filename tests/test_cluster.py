"""Cluster actions through the real `kubernetes` client against a local API server over HTTP."""

import json
import time

import pytest

from conftest import MAIN_COMMAND
from fake_apiserver import FakeApiServer

IMAGE = "cluster.image=registry.example/train:1"
HP = "hyperpodpytorchjobs"


@pytest.fixture
def api(tmp_path, monkeypatch):
    """A running API server and a kubeconfig (namespace team-a) pointing at it."""
    with FakeApiServer(forbidden_namespaces={"restricted"}) as server:
        monkeypatch.setenv("KUBECONFIG", server.kubeconfig(tmp_path / "kubeconfig"))
        yield server


def one_line_error(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_submit_creates_configmap_and_job_with_a_content_derived_suffix(launch, api):
    code, out, err = launch(*MAIN_COMMAND, IMAGE, "action=submit")
    assert code == 0, err
    (name,) = api.names(HP)
    assert name.startswith("llama3-1-8b-sft-") and len(name) == len("llama3-1-8b-sft-") + 5
    assert f"submitted hyperpodpytorchjob/{name} in namespace team-a" in out and "suffix" in out
    configmap = api.store[("configmaps", "team-a", f"training-config-{name}")]
    assert set(configmap["data"]) >= {"config.yaml", "config-n2.yaml", "config-n8.yaml"}
    job = api.store[(HP, "team-a", name)]
    volumes = job["spec"]["replicaSpecs"][0]["template"]["spec"]["volumes"]
    assert {"name": "training-config", "configMap": {"name": f"training-config-{name}"}} in volumes


def test_submit_is_idempotent_and_a_changed_config_gets_a_new_name(launch, api):
    assert launch(*MAIN_COMMAND, IMAGE, "action=submit")[0] == 0
    code, out, _ = launch(*MAIN_COMMAND, IMAGE, "action=submit")
    assert code == 0 and "nothing to do" in out and len(api.names(HP)) == 1
    assert launch(*MAIN_COMMAND, IMAGE, "action=submit", "recipes.elastic_policy.max_nodes=6")[0] == 0
    assert len(api.names(HP)) == 2


def test_server_side_dry_run_persists_nothing(launch, api):
    code, out, err = launch(*MAIN_COMMAND, IMAGE, "action=server_dry_run")
    assert code == 0, err
    assert "server-side dry run passed" in out and api.store == {}
    assert any("dryRun=All" in path for method, path in api.requests if method == "POST")


def test_kubeflow_target_submits_a_pytorchjob(launch, api):
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit", "target=kubeflow", "cluster.job_name=kf-job")
    assert code == 0, err
    assert api.names("pytorchjobs") == ["kf-job"]
    spec = api.store[("pytorchjobs", "team-a", "kf-job")]["spec"]
    assert spec["elasticPolicy"]["minReplicas"] == 2 and spec["elasticPolicy"]["maxReplicas"] == 8
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    assert worker["replicas"] == 2 and container["command"] == ["torchrun"] and container["image"] == IMAGE.split("=")[1]
    assert ("configmaps", "team-a", "training-config-kf-job") in api.store


def test_name_taken_needs_replace(launch, api):
    fixed = ["cluster.job_name=my-job", IMAGE]
    assert launch(*MAIN_COMMAND, *fixed, "action=submit")[0] == 0
    code, _, err = launch(*MAIN_COMMAND, *fixed, "action=submit", "recipes.elastic_policy.max_nodes=6")
    assert code == 2 and "already exists (409)" in one_line_error(err) and "cluster.replace=true" in err
    code, _, err = launch(*MAIN_COMMAND, *fixed, "action=submit", "recipes.elastic_policy.max_nodes=6",
                          "cluster.replace=true")
    assert code == 0, err
    assert api.store[(HP, "team-a", "my-job")]["spec"]["elasticPolicy"]["maxReplicas"] == 6


def test_status_table_and_exit_code_follow_the_job(launch, api):
    assert launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.job_name=watched")[0] == 0
    job = api.store[(HP, "team-a", "watched")]
    job["status"] = {"conditions": [{"type": "Running", "status": "True", "message": "2/2 pods running"}],
                     "restartCount": 1, "elasticScalingStatus": {"targetReplicas": {"pods": 4}}}
    api.pods = [{"metadata": {"name": f"watched-pods-{i}", "labels": {"HPJob": "watched"}},
                 "spec": {"containers": [{"name": "pytorch"}], "nodeName": f"node-{i}"},
                 "status": {"phase": "Running", "containerStatuses": [{"name": "pytorch", "restartCount": i,
                            "ready": True, "image": "x", "imageID": "y"}]}} for i in range(2)]
    code, out, err = launch(*MAIN_COMMAND, "action=status", "cluster.job_name=watched")
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert row.split() == ["watched", "Running", "2", "4", "1", "2/2"]
    assert "watched-pods-1" in out and "node-1" in out
    job["status"]["conditions"].append({"type": "Failed", "status": "True", "message": "OOMKilled"})
    code, out, _ = launch(*MAIN_COMMAND, "action=status", "cluster.job_name=watched")
    assert code == 1 and "Failed" in out.splitlines()[1]


def test_delete_removes_job_and_configmap(launch, api):
    assert launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.job_name=doomed")[0] == 0
    code, out, _ = launch(*MAIN_COMMAND, "action=delete", "cluster.job_name=doomed")
    assert code == 0 and api.store == {}
    code, _, err = launch(*MAIN_COMMAND, "action=delete", "cluster.job_name=doomed")
    assert code == 2 and "nothing to delete" in one_line_error(err)


# --- errors: one line with the fix, non-zero exit, nothing left behind ------------------------------
def test_rejected_job_leaves_no_configmap(launch, api):
    api.fail_creates.add(HP)
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit")
    assert code == 2 and "API error 500" in one_line_error(err)
    assert api.store == {}


def test_invalid_object_shows_the_servers_field_messages(launch, api):
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.clean_pod_policy=Sometimes")
    line = one_line_error(err)
    assert code == 2 and "rejected as invalid (422)" in line
    assert "spec.runPolicy.cleanPodPolicy" in line and "'Sometimes' is not one of" in line
    assert api.store == {}


def test_forbidden_namespace_names_verb_and_resource(launch, api):
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.namespace=restricted")
    line = one_line_error(err)
    assert code == 2 and "get hyperpodpytorchjobs in namespace restricted: forbidden (403)" in line
    assert 'cannot get resource "hyperpodpytorchjobs"' in line and "RBAC permission to get" in line
    assert api.store == {}


def test_missing_crd_names_the_operator_to_install(launch, tmp_path, monkeypatch):
    with FakeApiServer(crds=("kubeflow",)) as server:
        monkeypatch.setenv("KUBECONFIG", server.kubeconfig(tmp_path / "kubeconfig"))
        code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit")
        line = one_line_error(err)
        assert code == 2 and "CRD (hyperpodpytorchjobs.sagemaker.amazonaws.com) is not installed" in line
        assert "HyperPod training operator" in line and server.store == {}
    with FakeApiServer(crds=("hyperpod",)) as server:
        monkeypatch.setenv("KUBECONFIG", server.kubeconfig(tmp_path / "kubeconfig"))
        code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit", "target=kubeflow")
        assert code == 2 and "Kubeflow training operator" in one_line_error(err)


def test_bad_credentials_are_a_401_line(launch, api, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", api.kubeconfig(tmp_path / "stale", token="expired"))
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit")
    assert code == 2 and "unauthorized (401)" in one_line_error(err)


def test_unreachable_cluster(launch, tmp_path, monkeypatch):
    with FakeApiServer() as server:
        path = server.kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", path)  # the server is gone: connection refused
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit")
    assert code == 2 and "cluster unreachable at http://127.0.0.1:" in one_line_error(err)


def test_no_kubeconfig(launch, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit")
    line = one_line_error(err)
    assert code == 2 and f"no kubeconfig at {tmp_path / 'missing'}" in line and "aws eks update-kubeconfig" in line


@pytest.mark.parametrize("text, why", [("apiVersion: v1\nclusters: [\n  - bad: : :\n", "not valid YAML at line 3"),
                                       ("apiVersion: v1\nkind: Config\nclusters: 5\n", "'int' object is not iterable")])
def test_a_malformed_kubeconfig_is_one_line(launch, tmp_path, monkeypatch, text, why):
    (tmp_path / "kubeconfig").write_text(text)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit")
    assert code == 2 and err.strip().splitlines() == [
        f"error: kubeconfig {tmp_path / 'kubeconfig'} is not usable ({why}): regenerate it or point KUBECONFIG at another"]


def test_a_context_the_kubeconfig_lacks_is_named_with_the_ones_it_has(launch, api, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.kube_context=prod")
    line = one_line_error(err)
    assert code == 2 and "cluster.kube_context='prod' is not a context of" in line and "one of " in line


def test_status_logs_and_delete_find_the_name_submit_gave(launch, api):
    """Submit adds a config-hash suffix to the name; the other actions find that job from the same
    command line, and say which to pick when two submits of the recipe exist."""
    assert launch(*MAIN_COMMAND, IMAGE, "action=submit")[0] == 0
    (name,) = api.names(HP)
    code, out, err = launch(*MAIN_COMMAND, "action=status")
    assert code == 0 and name in out, err
    assert launch(*MAIN_COMMAND, IMAGE, "action=submit", "recipes.elastic_policy.max_nodes=6")[0] == 0
    code, _, err = launch(*MAIN_COMMAND, "action=logs")
    assert code == 2 and "pick one with cluster.job_name=<name>" in one_line_error(err) and name in err
    code, out, err = launch(*MAIN_COMMAND, "recipes.elastic_policy.max_nodes=6", "action=delete")
    assert code == 2 and "pick one" in err  # the name does not depend on the config the command gives
    assert launch(*MAIN_COMMAND, "action=delete", f"cluster.job_name={name}")[0] == 0
    code, out, err = launch(*MAIN_COMMAND, "action=delete")
    assert code == 0 and api.names(HP) == [], err


def test_orphan_configmap_of_the_job_name_is_overwritten(launch, api):
    api.store[("configmaps", "team-a", "training-config-lone")] = {"metadata": {"name": "training-config-lone"},
                                                                   "data": {"config.yaml": "stale"}}
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.job_name=lone")
    assert code == 0, err
    assert api.store[("configmaps", "team-a", "training-config-lone")]["data"]["config.yaml"] != "stale"
    assert api.names(HP) == ["lone"]


# --- after submit: progress, logs and the list of jobs, through a resize ---------------------------
def trainer(record: dict) -> str:
    """A line of the trainer's stream as the agent tees it into the pod's log."""
    return "[default0]:" + json.dumps(record)


def launch_records(start: float, nodes: int, steps: range, launch: str, resumed_from=None, history=()) -> list[str]:
    lines = [trainer({"time": start, "launch": launch, "event": "start", "world_size": nodes * 8, "nodes": nodes,
                      "max_steps": 100, "max_epochs": None})]
    if resumed_from is not None:
        lines.append(trainer({"time": start + 5, "launch": launch, "event": "resume", "step": resumed_from,
                              "world_size": nodes * 8, "history": list(history)}))
    for i, step in enumerate(steps):
        lines.append(trainer({"time": start + 10 + 2 * i, "launch": launch, "step": step, "loss": 2.0 - step / 100,
                              "tokens_per_s": 1000.0 * nodes, "tokens_per_s_per_device": 125.0,
                              "world_size": nodes * 8, "step_time": 2.0}))
    return lines


def node_line(rank: int, nodes: int) -> str:
    return trainer({"event": "node", "node_rank": rank, "nodes": nodes, "time": time.time()})


@pytest.fixture
def running(launch, api):
    """A submitted job `watched` on 2 pods, rank 0 (pod a) at step 10 of 100 with a checkpoint at 10."""
    assert launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.job_name=watched")[0] == 0
    api.store[(HP, "team-a", "watched")]["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    for pod in ("watched-pods-a", "watched-pods-b"):
        api.add_pod(pod, "watched")
    start = time.time() - 60
    api.log("watched-pods-a", node_line(0, 2), *launch_records(start, 2, range(1, 11), "l1"),
            trainer({"time": start + 30, "event": "checkpoint", "step": 10, "launch": "l1"}))
    api.log("watched-pods-b", node_line(1, 2), "rank 1 says hello")
    return api


def status(launch):
    code, out, err = launch(*MAIN_COMMAND, "action=status", "cluster.job_name=watched")
    assert code == 0, err
    return out


def test_status_says_where_training_is_through_a_resize(launch, running):
    api = running
    out = status(launch)
    assert "training: training for" in out and "step 10/100 at 2 nodes (16 processes)" in out
    assert "loss 1.9, 2,000 tokens/s (125 per device)" in out
    assert "last complete checkpoint: step 10, " in out and "ETA 3m00s at the current speed" in out  # 90 steps x 2 s
    assert "resizes: 0, failures: 0" in out
    # The operator resizes 2 -> 3: rank 0 checkpoints and stops ...
    api.log("watched-pods-a", trainer({"time": time.time(), "event": "stop", "step": 12, "signal": "SIGUSR1",
                                       "launch": "l1"}))
    assert "training: stopping for" in status(launch)
    # ... the pods are replaced (new names), the trainer loads, then trains at 3 nodes.
    for pod in ("watched-pods-a", "watched-pods-b"):
        api.remove_pod(pod)
    assert "training: between sizes: no pod of the job exists now" in status(launch)
    history = [{"time": time.time(), "step": 12, "from": 16, "to": 24, "cause": "resize"}]
    for pod, rank in (("watched-pods-c", 0), ("watched-pods-d", 1), ("watched-pods-e", 2)):
        api.add_pod(pod, "watched")
        api.log(pod, node_line(rank, 3))
    start = time.time() - 5
    api.log("watched-pods-c", *launch_records(start, 3, range(0), "l2", resumed_from=12, history=history))
    assert "training: loading for" in status(launch)
    api.log("watched-pods-c", *launch_records(start, 3, range(13, 15), "l2")[1:])
    out = status(launch)
    assert "step 14/100 at 3 nodes (24 processes)" in out and "3,000 tokens/s" in out
    assert "resizes: 1, failures: 0" in out and "resize at step 12: 16 -> 24 processes" in out


def test_status_of_a_grpo_job_shows_its_reward_and_judge_names_its_run_directory_and_draws_its_curves(
        launch, running, tmp_path):
    from training.contract.curves import CHART

    start = time.time() - 30
    running.logs["watched-pods-a"].clear()
    running.log("watched-pods-a", trainer({"time": start, "launch": "g1", "event": "start", "world_size": 16,
                                           "nodes": 2, "max_steps": 50, "run_dir": "/fsx/runs/watched"}),
                *(trainer({"time": start + s, "launch": "g1", "step": s, "loss": 0.01, "reward": 0.05 * s,
                           "reward_std": 0.2, "reward_judge": 0.05 * s, "kl": 0.002 * s,
                           "completion_tokens_mean": 40.0, "world_size": 16, "step_time": 1.0,
                           "judge_calls": 1000.0, "judge_cached": 24.0, "judge_retries": 7.0,
                           "judge_failed_timeout": 2.0, "judge_failed_status": 0.0, "judge_dropped": 2.0,
                           "judge_input_tokens": 812000.0, "judge_output_tokens": 9000.0, "judge_s": 41.5,
                           "judge_wait_s": 3.25})
                  for s in range(1, 13)),
                trainer({"time": start + 12, "launch": "g1", "event": "warning", "step": 12,
                         "message": "the judge openai/j at http://judge:8000/v1: 32 of 32 verdicts failed at step 12 "
                                    "(32 connection)"}))
    out = status(launch)
    assert ("  warning: the judge openai/j at http://judge:8000/v1: 32 of 32 verdicts failed at step 12 "
            "(32 connection)") in out
    assert "reward 0.600 ±0.200, kl 0.024" in out
    assert ("judge, last step: 1000 calls, 24 from the ledger, 7 retries, failed 2 timeout, 2 dropped; 812,000 tokens "
            "in, 9,000 out; 41.5 s of judging, 3.2 s waited by the step") in out
    assert "run directory, on the job's volume: /fsx/runs/watched (metrics.jsonl; curves.png, the whole run's" in out
    chart = tmp_path / "out" / "watched" / CHART
    assert f"curves of steps 1-12 (rank 0's log) drawn here: {chart}" in out
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_status_before_any_progress_line_says_so(launch, running):
    running.logs["watched-pods-a"].clear()
    assert "training: no progress line in the rank-0 log yet" in status(launch)


def test_status_watch_refreshes_until_the_job_ends(launch, running, monkeypatch):
    import elastic_launcher.cluster.observe as observe

    job = running.store[(HP, "team-a", "watched")]
    calls = []

    def sleep(seconds):  # the job completes during the first wait
        calls.append(seconds)
        job["status"]["conditions"].append({"type": "Completed", "status": "True"})

    monkeypatch.setattr(observe.time, "sleep", sleep)
    code, out, err = launch(*MAIN_COMMAND, "action=status", "cluster.job_name=watched", "cluster.watch=true",
                            "cluster.watch_interval=7")
    assert code == 0, err
    assert calls == [7] and out.count("step 10/100") == 2  # shown, waited 7 s, shown again, stopped: the job ended
    assert out.split("--- ")[1].splitlines()[2].split()[1] == "Completed"  # the job row after the refresh


def logs(launch, *extra):
    return launch(*MAIN_COMMAND, "action=logs", "cluster.job_name=watched", *extra)


def test_logs_show_one_rank_or_all_and_find_rank_0_after_a_resize(launch, running):
    api = running
    code, out, err = logs(launch)
    assert code == 0, err
    assert '"step": 10' in out and "rank 1 says hello" not in out
    code, out, _ = logs(launch, "cluster.rank=1")
    assert code == 0 and "rank 1 says hello" in out and '"step"' not in out
    code, out, _ = logs(launch, "cluster.rank=all")
    assert code == 0 and "[watched-pods-b] [default0]:" in out and "[watched-pods-a] [default0]:" in out
    for pod in ("watched-pods-a", "watched-pods-b"):
        api.remove_pod(pod)
    api.add_pod("watched-pods-z", "watched")
    api.log("watched-pods-z", node_line(0, 1), "after the resize")
    code, out, _ = logs(launch)
    assert code == 0 and out.strip().endswith("after the resize")
    time.sleep(1.5)
    api.log("watched-pods-z", "newest line")
    code, out, _ = logs(launch, "cluster.since=1s")
    assert code == 0 and out.strip() == "newest line"


def test_logs_follow_the_job_across_pod_replacements_until_it_ends(launch, running):
    import threading

    api = running
    job = api.store[(HP, "team-a", "watched")]

    def operator():
        time.sleep(1.0)
        api.log("watched-pods-a", "step line while following")
        time.sleep(0.5)
        for pod in ("watched-pods-a", "watched-pods-b"):
            api.remove_pod(pod)
        api.add_pod("watched-pods-new", "watched")
        api.log("watched-pods-new", node_line(0, 1), "on the new pod")
        time.sleep(1.0)
        job["status"]["conditions"].append({"type": "Completed", "status": "True"})
        api.log("watched-pods-new", "the end")
        time.sleep(0.5)
        api.remove_pod("watched-pods-new")

    thread = threading.Thread(target=operator)
    thread.start()
    code, out, err = logs(launch, "cluster.follow=true")
    thread.join()
    assert code == 0, err
    lines = out.splitlines()
    assert lines.index("step line while following") < lines.index("on the new pod") < lines.index("the end")
    assert len(lines) == len(set(lines)) + lines.count("")  # nothing shown twice


def test_log_errors_are_one_line(launch, api):
    assert launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.job_name=watched")[0] == 0
    code, _, err = logs(launch)
    assert code == 2 and "no pod of job 'watched' in namespace team-a yet" in one_line_error(err)
    api.add_pod("watched-pods-a", "watched")
    api.log("watched-pods-a", node_line(0, 1))
    code, _, err = logs(launch, "cluster.rank=3")
    assert code == 2 and "no pod of job 'watched' runs node rank 3" in one_line_error(err)
    api.forbid_logs = True
    code, _, err = logs(launch)
    line = one_line_error(err)
    assert code == 2 and "forbidden (403)" in line and 'resources: ["pods/log"], verbs: ["get"]' in line


def test_list_shows_the_jobs_this_launcher_submitted(launch, running):
    api = running
    assert launch("recipes=llama/tiny_llama_sft", IMAGE, "action=submit", "cluster.job_name=other")[0] == 0
    api.store[(HP, "team-a", "foreign")] = {"metadata": {"name": "foreign", "labels": {}}, "spec": {}}
    code, out, err = launch(*MAIN_COMMAND, "action=list")
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert set(rows) == {"watched", "other"}  # not the job someone else submitted
    assert rows["watched"][1:7] == ["HyperPodPyTorchJob", "llama.llama3_1_8b_sft", "Running", "2", "/", "2..8"]
    assert rows["watched"][7] == "10/100" and rows["watched"][8].endswith("s")  # age: seconds since creation
    assert rows["other"][3] == "Pending" and rows["other"][7] == "-"  # no pod yet


# --- a Kubeflow Trainer v2 TrainJob: the same actions -----------------------------------------------
TRAINJOB = ["recipes=llama/llama3_1_8b_sft", "target=trainjob", "cluster.job_name=tj"]


def trainjob_pod(api, name: str, job: str, replicated_job: str = "node") -> None:
    """A pod as the JobSet of a TrainJob names and labels it, its trainer container named `node`."""
    api.add_pod(name, job, labels={"jobset.sigs.k8s.io/jobset-name": job,
                                   "jobset.sigs.k8s.io/replicatedjob-name": replicated_job}, container="node")


def test_a_trainjob_is_submitted_followed_listed_and_deleted(launch, api):
    code, out, err = launch(*TRAINJOB, IMAGE, "action=submit")
    assert code == 0, err
    assert "submitted trainjob/tj in namespace team-a" in out and api.names("trainjobs") == ["tj"]
    assert "config-n2.yaml" in api.store[("configmaps", "team-a", "training-config-tj")]["data"]
    job = api.store[("trainjobs", "team-a", "tj")]
    # The runtime starts the JobSet: one pod per node (named <job>-node-<node>-0) and an initializer.
    job["status"] = {"jobsStatus": [{"name": "node", "active": 1, "ready": 1, "failed": 0, "succeeded": 0,
                                     "suspended": 0}]}
    for pod in ("tj-node-0-0", "tj-node-1-0"):
        trainjob_pod(api, pod, "tj")
    trainjob_pod(api, "tj-dataset-initializer-0-0", "tj", replicated_job="dataset-initializer")
    start = time.time() - 60
    api.log("tj-node-1-0", node_line(1, 2), "rank 1 says hello")
    api.log("tj-node-0-0", node_line(0, 2), *launch_records(start, 2, range(1, 11), "l1"))
    api.log("tj-dataset-initializer-0-0", "downloading")

    code, out, err = launch(*TRAINJOB, "action=status")
    assert code == 0, err
    job_row = out.splitlines()[1].split()
    assert job_row[:3] == ["tj", "Running", "2"] and job_row[-1] == "2/2"  # numNodes; the initializer is not a node
    assert "step 10/100 at 2 nodes (16 processes)" in out and "trainer status" not in out
    job["status"]["trainerStatus"] = {"progressPercentage": 10, "estimatedRemainingSeconds": 180,
                                      "metrics": [{"name": "loss", "value": "1.9"}],
                                      "lastUpdatedTime": "2026-11-24T10:00:00Z"}
    out = launch(*TRAINJOB, "action=status")[1]
    assert ("trainer status (reported by the runtime at 2026-11-24T10:00:00Z): 10% done, about 3m00s left, "
            "loss 1.9") in out

    code, out, err = launch(*TRAINJOB, "action=logs")  # node rank 0, from the `node` container
    assert code == 0 and '"step": 10' in out and "hello" not in out and "downloading" not in out, err
    assert "rank 1 says hello" in launch(*TRAINJOB, "action=logs", "cluster.rank=1")[1]

    code, out, err = launch(*TRAINJOB, "action=list")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert code == 0 and rows["tj"][1:8] == ["TrainJob", "llama.llama3_1_8b_sft", "Running", "2", "/", "static",
                                                 "10/100"], out

    job["status"]["conditions"] = [{"type": "Complete", "status": "True", "reason": "JobsCompleted"}]
    code, out, _ = launch(*TRAINJOB, "action=status")
    assert code == 0 and out.splitlines()[1].split()[1] == "Complete"
    code, out, err = launch(*TRAINJOB, "action=delete")
    assert code == 0 and "deleted trainjobs and configmaps of tj" in out, err
    assert api.names("trainjobs") == [] and ("configmaps", "team-a", "training-config-tj") not in api.store


def test_a_trainjob_the_v2_3_0_schema_rejects_is_refused_with_its_field(launch, api):
    """The loopback API server holds the CRD's schema: what it refuses comes back as one line naming
    the field, and the ConfigMap created for it is removed again."""
    code, _, err = launch(*TRAINJOB, f"cluster.image=registry.example/{'t' * 500}", "action=submit")
    line = one_line_error(err)
    assert code == 2 and "rejected as invalid (422)" in line and "spec.trainer.image" in line
    assert api.store == {}


def test_a_cluster_without_trainer_v2_is_told_what_to_install(launch, tmp_path, monkeypatch):
    with FakeApiServer(crds=("hyperpod", "kubeflow")) as server:
        monkeypatch.setenv("KUBECONFIG", server.kubeconfig(tmp_path / "kubeconfig"))
        code, _, err = launch(*TRAINJOB, IMAGE, "action=submit")
    line = one_line_error(err)
    assert code == 2 and "TrainJob CRD (trainjobs.trainer.kubeflow.org) is not installed" in line
    assert "kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0" in line
