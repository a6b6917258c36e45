"""Cluster actions through the `kubernetes` client: submit, server-side dry run, status, delete
(and through observe.py: training progress, logs, the list of jobs).

Every failure becomes one line that says what was refused and what to do: no kubeconfig, cluster
unreachable, 401/403 (which verb on which resource), the CRD's operator not installed, a name taken,
an object the API server rejected (with its field messages). A ConfigMap created for a job the
server then rejects is deleted again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass

from elastic_launcher.errors import LauncherError
from elastic_launcher.render import configmap_name, render

CONTENT_HASH = "elastic-launcher/config-hash"


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


def _unique_name(base: str, content_hash: str) -> str:
    """A name derived from the rendered content: resubmitting the same job finds it again
    (idempotent), a changed job gets a new name (no clash with the running one)."""
    suffix = content_hash[:5]
    return f"{base[: 63 - len(suffix) - 1].rstrip('-')}-{suffix}"


def submit(job, cluster: Cluster, dry_run: bool) -> int:
    settings, kind = job.settings.cluster, KINDS[job.settings.target]
    plan = job.plan
    first = render(plan, settings, job.settings.target, cluster.namespace, job.recipe_name)
    content_hash = hashlib.sha256(first.manifest.encode()).hexdigest()[:16]
    if settings.unique_name and not settings.job_name:
        plan = dataclasses.replace(plan, job_name=_unique_name(plan.job_name, content_hash))
    rendered = render(plan, settings, job.settings.target, cluster.namespace, job.recipe_name)
    configmap, body = rendered.objects
    body["metadata"].setdefault("annotations", {})[CONTENT_HASH] = content_hash
    name, ns = plan.job_name, cluster.namespace
    if not cluster.crd_installed(kind):
        raise LauncherError(f"the {kind.kind} CRD ({kind.plural}.{kind.group}) is not installed in the cluster at "
                            f"{cluster.host}: install {kind.operator}")
    dry = {"dry_run": "All"} if dry_run else {}

    existing = _get(cluster, kind, name)
    if existing is not None:
        if (existing["metadata"].get("annotations") or {}).get(CONTENT_HASH) == content_hash and not dry_run:
            print(f"{kind.kind.lower()}/{name} already exists in namespace {ns} with this exact config: nothing to do")
            return 0
        if not settings.replace:
            raise LauncherError(f"create {kind.plural}/{name} in namespace {ns}: already exists (409) with a different "
                                f"config: set cluster.replace=true to replace it, or pick another cluster.job_name")
        if not dry_run:
            delete(job, cluster, name=name, quiet=True)

    created_configmap = False
    try:
        if cluster.call("create configmaps", cluster.core.create_namespaced_config_map, ns, configmap,
                        tolerate=(409,), **dry) is None:
            # An orphan config of this very job name (its job is gone): ours to overwrite.
            cluster.call("replace configmaps", cluster.core.replace_namespaced_config_map, configmap_name(name), ns,
                         configmap, **dry)
        created_configmap = not dry_run
        cluster.call(f"create {kind.plural}", cluster.custom.create_namespaced_custom_object, kind.group,
                     kind.version, ns, kind.plural, body, kind=kind, **dry)
    except LauncherError:
        if created_configmap:  # never leave the config of a job that does not exist
            cluster.call("delete configmaps", cluster.core.delete_namespaced_config_map, configmap_name(name), ns)
        raise
    if dry_run:
        print(f"server-side dry run passed: the API server accepted configmap/{configmap_name(name)} and "
              f"{kind.kind.lower()}/{name} in namespace {ns} (nothing was persisted)")
    else:
        suffix = name[len(job.plan.job_name):] if name != job.plan.job_name else ""
        print(f"submitted {kind.kind.lower()}/{name} in namespace {ns}" +
              (f" (name suffix '{suffix}' derived from the config)" if suffix else ""))
        print(f"follow it: python launcher.py recipes={job.recipe_name} target={job.settings.target} action=status "
              f"cluster.job_name={name} cluster.namespace={ns}")
    return 0


def _get(cluster: Cluster, kind: JobKind, name: str) -> dict | None:
    return cluster.call(f"get {kind.plural}", cluster.custom.get_namespaced_custom_object, kind.group, kind.version,
                        cluster.namespace, kind.plural, name, tolerate=(404,))


def delete(job, cluster: Cluster, name: str | None = None, quiet: bool = False) -> int:
    kind, name = KINDS[job.settings.target], name or job.settings.cluster.job_name or job.plan.job_name
    gone = []
    for what, fn, args in ((f"delete {kind.plural}", cluster.custom.delete_namespaced_custom_object,
                            (kind.group, kind.version, cluster.namespace, kind.plural, name)),
                           ("delete configmaps", cluster.core.delete_namespaced_config_map,
                            (configmap_name(name), cluster.namespace))):
        if cluster.call(what, fn, *args, tolerate=(404,)) is not None:
            gone.append(what.split()[1])
    if not gone and not quiet:
        raise LauncherError(f"nothing to delete: no {kind.kind} {name!r} and no configmap {configmap_name(name)!r} in "
                            f"namespace {cluster.namespace}")
    if not quiet:
        print(f"deleted {' and '.join(gone)} of {name} in namespace {cluster.namespace}")
    return 0


def _phase(obj: dict) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    true = [c for c in conditions if str(c.get("status")) == "True"]
    return true[-1]["type"] if true else ("Pending" if not conditions else conditions[-1]["type"])


def status(job, cluster: Cluster) -> int:
    """The job and its pods, then the training's own view (observe.py); `cluster.watch` refreshes
    until the job ends."""
    from elastic_launcher import observe

    kind, name = KINDS[job.settings.target], job.settings.cluster.job_name or job.plan.job_name
    if not job.settings.cluster.watch:
        return _status_once(cluster, kind, name)
    return observe.watch(lambda: _status_once(cluster, kind, name), lambda: observe._finished(cluster, kind, name),
                         job.settings.cluster.watch_interval)


def _status_once(cluster: Cluster, kind: JobKind, name: str) -> int:
    from elastic_launcher import observe

    obj = _get(cluster, kind, name)
    if obj is None:
        raise LauncherError(f"no {kind.kind} named {name!r} in namespace {cluster.namespace}: check cluster.job_name "
                            f"(submit prints the full name) and cluster.namespace")
    st, spec = obj.get("status") or {}, obj.get("spec") or {}
    replica_specs = spec.get("replicaSpecs") or [{"replicas": (spec.get("pytorchReplicaSpecs") or {})
                                                  .get("Worker", {}).get("replicas")}]
    elastic = st.get("elasticScalingStatus") or {}
    target = ",".join(str(v) for v in (elastic.get("targetReplicas") or {}).values()) or "-"
    pods = cluster.call("list pods", cluster.core.list_namespaced_pod, cluster.namespace,
                        label_selector=kind.pod_selector.format(name))
    phase = _phase(obj)
    rows = [("job", "phase", "replicas", "target", "restarts", "pods running"),
            (name, phase, str(replica_specs[0].get("replicas", "-")), target, str(st.get("restartCount", 0)),
             f"{sum(p.status.phase == 'Running' for p in pods.items)}/{len(pods.items)}")]
    for c in (st.get("conditions") or [])[-3:]:
        rows.append(("  condition", c.get("type", ""), str(c.get("status", "")), "", "", (c.get("message") or "")[:60]))
    for p in pods.items:
        restarts = sum(cs.restart_count for cs in (p.status.container_statuses or []))
        rows.append(("  pod " + p.metadata.name, p.status.phase or "", "", "", str(restarts), p.spec.node_name or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows))
    if pods.items:
        observe.print_progress(cluster, kind, name, None if target == "-" else target)
    elif phase not in observe.DONE_PHASES:
        print("training: between sizes: no pod of the job exists now (the operator is restarting or resizing it)")
    return 1 if phase == "Failed" else 0


def run(job) -> int:
    cluster = Cluster(job.settings.cluster.kube_context, job.settings.cluster.namespace)
    action = job.settings.action
    if action in ("submit", "server_dry_run"):
        return submit(job, cluster, dry_run=action == "server_dry_run")
    if action == "status":
        return status(job, cluster)
    if action in ("logs", "list"):
        from elastic_launcher import observe

        return observe.logs(job, cluster, KINDS[job.settings.target]) if action == "logs" else \
            observe.list_jobs(job, cluster)
    return delete(job, cluster)
