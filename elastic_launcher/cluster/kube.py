"""The Kubernetes API as the launcher's actions use it: the clients for one kube context and
namespace with every failure turned into one line (no kubeconfig, unreachable, 401, 403, 404, 409,
422), the two job kinds, and reading a job and its phase."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import yaml

from elastic_launcher.errors import LauncherError
from elastic_launcher.render.manifests import MANAGED_BY_SELECTOR


@dataclass(frozen=True)
class JobKind:
    kind: str
    group: str
    version: str
    plural: str
    operator: str  # what to install when the CRD is missing
    pod_selector: str  # label selector of the job's pods, formatted with the job name
    container: str = "pytorch"  # the trainer's container in those pods


KINDS = {
    "hyperpod": JobKind("HyperPodPyTorchJob", "sagemaker.amazonaws.com", "v1", "hyperpodpytorchjobs",
                        "the SageMaker HyperPod training operator (EKS add-on amazon-sagemaker-hyperpod-training-"
                        "operator, >= v1.2 for elastic jobs)", "HPJob={}"),
    "kubeflow": JobKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs",
                        "the Kubeflow training operator v1 (kubectl apply --server-side -k \"github.com/kubeflow/"
                        "training-operator.git/manifests/overlays/standalone?ref=v1.9.0\")",
                        "training.kubeflow.org/job-name={}"),
    "trainjob": JobKind("TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs",
                        "Kubeflow Trainer v2 with its runtimes (kubectl apply --server-side -k \"github.com/kubeflow/"
                        "trainer.git/manifests/overlays/manager?ref=v2.3.0\" and .../overlays/runtimes?ref=v2.3.0)",
                        "jobset.sigs.k8s.io/jobset-name={},jobset.sigs.k8s.io/replicatedjob-name=node", "node"),
}


class Cluster:
    """The API clients for one kube context and namespace, with errors translated."""

    def __init__(self, context: str | None, namespace: str | None):
        import logging

        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        logging.getLogger("urllib3").setLevel(logging.ERROR)  # retries would print warnings over our one line
        configuration = client.Configuration()
        # Read KUBECONFIG now: the client reads it once, at import time.
        kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            if context:
                active = next(c for c in contexts if c["name"] == context)
        except (ConfigException, FileNotFoundError, StopIteration, yaml.YAMLError, TypeError, AttributeError,
                KeyError) as e:  # the file is missing, not YAML, or YAML of another shape than a kubeconfig
            try:
                config.load_incluster_config(client_configuration=configuration)
                active = {"context": {}}
            except ConfigException:
                raise LauncherError(_kubeconfig_problem(kubeconfig, context, e)) from None
        configuration.retries = 1
        self.namespace = namespace or active["context"].get("namespace") or "default"
        api = client.ApiClient(configuration)
        self.core, self.custom, self.host = client.CoreV1Api(api), client.CustomObjectsApi(api), configuration.host

    def call(self, what: str, fn, *args, kind: JobKind | None = None, tolerate: tuple[int, ...] = (), **kwargs):
        """Run one API call; `what` is "<verb> <resource>" for the error message. An HTTP status
        in `tolerate` (e.g. 404 for "missing is fine") answers None instead of failing."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return fn(*args, **kwargs)
        except ApiException as e:
            if e.status in tolerate:
                return None
            raise LauncherError(self._explain(e, what, kind)) from None
        except (HTTPError, OSError) as e:
            raise LauncherError(f"cluster unreachable at {self.host} ({type(e).__name__}): check the kube context, "
                                f"the VPN or endpoint access, and that the cluster is up") from None

    def _explain(self, e, what: str, kind: JobKind | None) -> str:
        try:
            body = json.loads(e.body or "{}")
        except ValueError:
            body = {}
        message = body.get("message") or e.reason or ""
        where = f"{what} in namespace {self.namespace}"
        if e.status == 401:
            return f"{where}: unauthorized (401): the kubeconfig's credentials were rejected; refresh them"
        if e.status == 403:
            return (f"{where}: forbidden (403): {message}; ask a cluster admin for RBAC permission to {what} "
                    f"(a Role/RoleBinding in namespace {self.namespace})")
        if e.status == 404 and kind and "create" in what:
            return (f"{where}: not found (404): no {kind.plural}.{kind.group} resource or no namespace "
                    f"{self.namespace}; install {kind.operator}, or create the namespace")
        if e.status == 404:
            return f"{where}: not found (404): {message}"
        if e.status == 409:
            return (f"{where}: already exists (409): pick another cluster.job_name, set cluster.unique_name=true, "
                    f"or set cluster.replace=true to replace it")
        if e.status == 422:
            causes = (body.get("details") or {}).get("causes") or []
            fields = "; ".join(f"{c.get('field', '?')}: {c.get('message', '')}" for c in causes) or message
            return f"{where}: rejected as invalid (422): {fields}"
        return f"{where}: API error {e.status} {e.reason}: {message}"

    def crd_installed(self, kind: JobKind) -> bool:
        resources = self.call(f"discover {kind.group}/{kind.version}", self.custom.get_api_resources, kind.group,
                              kind.version, tolerate=(404,))
        return resources is not None and any(r.name == kind.plural for r in resources.resources)


SUFFIX_LEN = 5  # hex digits of the config hash that submit appends to a job's name


def _stem(base: str) -> str:
    """The part of a job name submit keeps before its suffix (names are at most 63 characters)."""
    return base[: 63 - SUFFIX_LEN - 1].rstrip("-")


def unique_name(base: str, content_hash: str) -> str:
    """A name derived from the rendered content: resubmitting the same job finds it again
    (idempotent), a changed job gets a new name (no clash with the running one)."""
    return f"{_stem(base)}-{content_hash[:SUFFIX_LEN]}"


def submitted_name(job, cluster: Cluster, kind: JobKind) -> str:
    """The name submit gave the job: `cluster.job_name` when set; else the plan's name, or the one job
    in the namespace named as submit names it (the plan's name and a config-hash suffix)."""
    if job.settings.cluster.job_name:
        return job.settings.cluster.job_name
    base = job.plan.job_name
    if get_job(cluster, kind, base) is not None:
        return base
    found = cluster.call(f"list {kind.plural}", cluster.custom.list_namespaced_custom_object, kind.group, kind.version,
                         cluster.namespace, kind.plural, label_selector=MANAGED_BY_SELECTOR)
    pattern = re.compile(re.escape(_stem(base)) + rf"-[0-9a-f]{{{SUFFIX_LEN}}}")
    names = sorted(o["metadata"]["name"] for o in found.get("items", []) if pattern.fullmatch(o["metadata"]["name"]))
    if len(names) > 1:
        raise LauncherError(f"{len(names)} {kind.kind}s submitted as {base} in namespace {cluster.namespace} "
                            f"({', '.join(names)}): pick one with cluster.job_name=<name>")
    return names[0] if names else base  # none: the caller's "no such job" names the plan's name


def _kubeconfig_problem(path: str, context: str | None, error: Exception) -> str:
    """What is wrong with the kubeconfig, and the one thing to do about it."""
    if not os.path.exists(path):
        return (f"no kubeconfig at {path}: create one for your cluster (EKS: `aws eks update-kubeconfig --name "
                f"<cluster>`) or point KUBECONFIG at one")
    from kubernetes import config

    try:
        names = [c["name"] for c in config.list_kube_config_contexts(config_file=path)[0]]
    except Exception:  # noqa: BLE001 - an unreadable file is reported below
        names = []
    if context and names and context not in names:
        return f"cluster.kube_context={context!r} is not a context of {path}: one of {', '.join(names)}"
    if isinstance(error, yaml.YAMLError):
        mark = getattr(error, "problem_mark", None)
        why = "not valid YAML" + (f" at line {mark.line + 1}" if mark else "")
    else:
        why = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return f"kubeconfig {path} is not usable ({why}): regenerate it or point KUBECONFIG at another"


def get_job(cluster: Cluster, kind: JobKind, name: str) -> dict | None:
    return cluster.call(f"get {kind.plural}", cluster.custom.get_namespaced_custom_object, kind.group, kind.version,
                        cluster.namespace, kind.plural, name, tolerate=(404,))


def job_phase(obj: dict) -> str:
    """The newest true condition; a TrainJob, which has none while it runs, is Running while a child
    job of its JobSet is active."""
    st = obj.get("status") or {}
    conditions = st.get("conditions") or []
    true = [c for c in conditions if str(c.get("status")) == "True"]
    if true:
        return true[-1]["type"]
    if any(j.get("active") for j in st.get("jobsStatus") or []):
        return "Running"
    return "Pending" if not conditions else conditions[-1]["type"]
