"""Cluster actions through the real `kubernetes` client against a local API server over HTTP."""

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
    assert code == 2 and "no usable kubeconfig" in one_line_error(err)


def test_orphan_configmap_of_the_job_name_is_overwritten(launch, api):
    api.store[("configmaps", "team-a", "training-config-lone")] = {"metadata": {"name": "training-config-lone"},
                                                                   "data": {"config.yaml": "stale"}}
    code, _, err = launch(*MAIN_COMMAND, IMAGE, "action=submit", "cluster.job_name=lone")
    assert code == 0, err
    assert api.store[("configmaps", "team-a", "training-config-lone")]["data"]["config.yaml"] != "stale"
    assert api.names(HP) == ["lone"]
