"""The Kubernetes API as the launcher's actions use it: the clients for one kube context and
namespace with every failure turned into one line (no kubeconfig, unreachable, 401, 403, 404, 409,
422), the two job kinds, and reading a job and its phase."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from elastic_launcher.errors import LauncherError


@dataclass(frozen=True)
class JobKind:
    kind: str
    group: str
    version: str
    plural: str
    operator: str  # what to install when the CRD is missing
    pod_selector: str  # label selector of the job's pods, formatted with the job name


KINDS = {
    "hyperpod": JobKind("HyperPodPyTorchJob", "sagemaker.amazonaws.com", "v1", "hyperpodpytorchjobs",
                        "the SageMaker HyperPod training operator (EKS add-on amazon-sagemaker-hyperpod-training-"
                        "operator, >= v1.2 for elastic jobs)", "HPJob={}"),
    "kubeflow": JobKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs",
                        "the Kubeflow training operator v1 (kubectl apply --server-side -k \"github.com/kubeflow/"
                        "training-operator.git/manifests/overlays/standalone?ref=v1.9.0\")",
                        "training.kubeflow.org/job-name={}"),
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
        except (ConfigException, FileNotFoundError, StopIteration) as e:
            try:
                config.load_incluster_config(client_configuration=configuration)
                active = {"context": {}}
            except ConfigException:
                raise LauncherError(f"no usable kubeconfig ({str(e).splitlines()[0]}): point KUBECONFIG at one, "
                                    f"e.g. `aws eks update-kubeconfig --name <cluster>`, or set cluster.kube_context")
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


def get_job(cluster: Cluster, kind: JobKind, name: str) -> dict | None:
    return cluster.call(f"get {kind.plural}", cluster.custom.get_namespaced_custom_object, kind.group, kind.version,
                        cluster.namespace, kind.plural, name, tolerate=(404,))


def job_phase(obj: dict) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    true = [c for c in conditions if str(c.get("status")) == "True"]
    return true[-1]["type"] if true else ("Pending" if not conditions else conditions[-1]["type"])
