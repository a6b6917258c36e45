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
from pathlib import Path

from elastic_launcher.cluster import observe
from elastic_launcher.cluster.kube import KINDS, Cluster, JobKind, get_job, job_phase, submitted_name, unique_name
from elastic_launcher.cluster.training_progress import duration
from elastic_launcher.errors import LauncherError
from elastic_launcher.job import Job
from elastic_launcher.render.manifests import configmap_name, render
from training.contract.curves import CHART

CONTENT_HASH = "elastic-launcher/config-hash"


def submit(job: Job, cluster: Cluster, dry_run: bool) -> int:
    settings, kind = job.settings.cluster, KINDS[job.settings.target]
    plan = job.plan
    first = render(plan, settings, job.settings.target, cluster.namespace, job.recipe_name)
    content_hash = hashlib.sha256(first.manifest.encode()).hexdigest()[:16]
    if settings.unique_name and not settings.job_name:
        plan = dataclasses.replace(plan, job_name=unique_name(plan.job_name, content_hash))
    rendered = render(plan, settings, job.settings.target, cluster.namespace, job.recipe_name)
    configmap, body = rendered.objects
    body["metadata"].setdefault("annotations", {})[CONTENT_HASH] = content_hash
    name, ns = plan.job_name, cluster.namespace
    if not cluster.crd_installed(kind):
        raise LauncherError(f"the {kind.kind} CRD ({kind.plural}.{kind.group}) is not installed in the cluster at "
                            f"{cluster.host}: install {kind.operator}")
    dry = {"dry_run": "All"} if dry_run else {}

    existing = get_job(cluster, kind, name)
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


def delete(job: Job, cluster: Cluster, name: str | None = None, quiet: bool = False) -> int:
    kind = KINDS[job.settings.target]
    name = name or submitted_name(job, cluster, kind)
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


def status(job: Job, cluster: Cluster) -> int:
    """The job and its pods, then the training's own view (observe.py); `cluster.watch` refreshes
    until the job ends."""
    kind = KINDS[job.settings.target]
    name = submitted_name(job, cluster, kind)
    chart = Path(job.settings.output_dir) / name / CHART
    if not job.settings.cluster.watch:
        return _status_once(cluster, kind, name, chart)
    return observe.watch(lambda: _status_once(cluster, kind, name, chart),
                         lambda: observe._finished(cluster, kind, name), job.settings.cluster.watch_interval)


def _status_once(cluster: Cluster, kind: JobKind, name: str, chart: Path) -> int:
    obj = get_job(cluster, kind, name)
    if obj is None:
        raise LauncherError(f"no {kind.kind} named {name!r} in namespace {cluster.namespace}: check cluster.job_name "
                            f"(submit prints the full name) and cluster.namespace")
    st, spec = obj.get("status") or {}, obj.get("spec") or {}
    replicas = ((spec.get("replicaSpecs") or [{}])[0].get("replicas")  # HyperPodPyTorchJob
                or (spec.get("pytorchReplicaSpecs") or {}).get("Worker", {}).get("replicas")  # PyTorchJob
                or (spec.get("trainer") or {}).get("numNodes") or "-")  # TrainJob
    elastic = st.get("elasticScalingStatus") or {}
    target = ",".join(str(v) for v in (elastic.get("targetReplicas") or {}).values()) or "-"
    pods = cluster.call("list pods", cluster.core.list_namespaced_pod, cluster.namespace,
                        label_selector=kind.pod_selector.format(name))
    phase = job_phase(obj)
    rows = [("job", "phase", "replicas", "target", "restarts", "pods running"),
            (name, phase, str(replicas), target, str(st.get("restartCount", 0)),
             f"{sum(p.status.phase == 'Running' for p in pods.items)}/{len(pods.items)}")]
    for c in (st.get("conditions") or [])[-3:]:
        rows.append(("  condition", c.get("type", ""), str(c.get("status", "")), "", "", (c.get("message") or "")[:60]))
    for p in pods.items:
        restarts = sum(cs.restart_count for cs in (p.status.container_statuses or []))
        rows.append(("  pod " + p.metadata.name, p.status.phase or "", "", "", str(restarts), p.spec.node_name or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows))
    if st.get("trainerStatus"):
        print(trainer_status(st["trainerStatus"]))
    if pods.items:
        observe.print_progress(cluster, kind, name, None if target == "-" else target, chart)
    elif phase not in observe.DONE_PHASES:
        print("training: between sizes: no pod of the job exists now (the operator is restarting or resizing it)")
    return 1 if phase == "Failed" else 0


def trainer_status(ts: dict) -> str:
    """A TrainJob's `status.trainerStatus` (what its runtime reports of the trainer) in one line."""
    parts = []
    if ts.get("progressPercentage") is not None:
        parts.append(f"{ts['progressPercentage']}% done")
    if ts.get("estimatedRemainingSeconds") is not None:
        parts.append(f"about {duration(ts['estimatedRemainingSeconds'])} left")
    parts += [f"{m['name']} {m['value']}" for m in ts.get("metrics") or []]
    return f"trainer status (reported by the runtime at {ts.get('lastUpdatedTime', '?')}): " + (", ".join(parts) or "-")


def run(job: Job) -> int:
    cluster = Cluster(job.settings.cluster.kube_context, job.settings.cluster.namespace)
    action = job.settings.action
    if action in ("submit", "server_dry_run"):
        return submit(job, cluster, dry_run=action == "server_dry_run")
    if action == "status":
        return status(job, cluster)
    if action == "logs":
        return observe.logs(job, cluster, KINDS[job.settings.target])
    if action == "list":
        return observe.list_jobs(job, cluster)
    return delete(job, cluster)
