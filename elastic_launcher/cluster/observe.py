"""After submit: where training is (`action=status`), its logs (`action=logs`) and the jobs this
launcher submitted (`action=list`), read through the Kubernetes API only: no shell in the pods,
no sidecar. The trainer's own JSON lines in its pods' logs (training.contract.records) say where it is;
pods change names when the job is resized, so every read finds the job's pods afresh by label.

Which pod runs which node rank: the local rank 0 of every node prints a `node` record at each
start; rank 0's pod is also the one whose log carries the step records.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from elastic_launcher.cluster.kube import KINDS, get_job, job_phase, submitted_name
from elastic_launcher.cluster.training_progress import describe, progress
from elastic_launcher.errors import LauncherError
from elastic_launcher.job import Job
from elastic_launcher.render.manifests import MANAGED_BY_SELECTOR
from training.contract.curves import draw, step_rows
from training.contract.records import parse_line

STATUS_TAIL_LINES = 5000  # a status reads the end of the rank-0 log: the newest step and its launch
LOG_RBAC = ('add to the Role of your user: {apiGroups: [""], resources: ["pods/log"], verbs: ["get"]} (and '
            '"pods": ["get", "list"])')
DONE_PHASES = ("Completed", "Complete", "Succeeded", "Failed")


def _created(pod) -> float:
    stamp = pod.metadata.creation_timestamp
    return stamp.timestamp() if hasattr(stamp, "timestamp") else 0.0


def job_pods(cluster, kind, name: str) -> list:
    pods = cluster.call("list pods", cluster.core.list_namespaced_pod, cluster.namespace,
                        label_selector=kind.pod_selector.format(name))
    return sorted(pods.items, key=lambda p: (_created(p), p.metadata.name))


def read_log(cluster, kind, pod: str, tail_lines: int | None = None, since_seconds: int | None = None,
             timestamps: bool = False) -> str | None:
    """The trainer container's log of a pod, or None when the pod is gone (404)."""
    kwargs = {"container": kind.container, "timestamps": timestamps}
    if tail_lines:
        kwargs["tail_lines"] = tail_lines
    if since_seconds:
        kwargs["since_seconds"] = since_seconds
    try:
        return cluster.call("get pods/log", cluster.core.read_namespaced_pod_log, pod, cluster.namespace,
                            tolerate=(404, 400), **kwargs)
    except LauncherError as e:
        if "(403)" in str(e):
            raise LauncherError(f"{e}; {LOG_RBAC}") from None
        raise


def records_of(text: str | None) -> list[dict]:
    return [r for r in map(parse_line, (text or "").splitlines()) if r is not None]


def rank0_records(cluster, kind, name: str, tail_lines: int = STATUS_TAIL_LINES) -> list[dict]:
    """The trainer's records from the pod of node rank 0: the pod whose log holds the newest step or event."""
    best: list[dict] = []
    for pod in job_pods(cluster, kind, name):
        found = [r for r in records_of(read_log(cluster, kind, pod.metadata.name, tail_lines=tail_lines))
                 if r.get("event") != "node"]
        if found and (not best or found[-1].get("time", 0) > best[-1].get("time", 0)):
            best = found
    return best


# --- status ----------------------------------------------------------------------------------------
def print_progress(cluster, kind, name: str, target: str | None, chart: Path) -> None:
    """Where training is, then its curves drawn here (`chart`) from the steps the rank-0 log holds."""
    records = rank0_records(cluster, kind, name)
    for line in describe(progress(records), time.time(), target):
        print(line, flush=True)
    steps = step_rows(records)
    if steps and draw(records, chart):
        print(f"  curves of steps {steps[0]['step']}-{steps[-1]['step']} (rank 0's log) drawn here: {chart}",
              flush=True)


def watch(show, finished, interval: float) -> int:
    """Call `show()` every `interval` seconds until `finished()`; returns show's last answer."""
    while True:
        code = show()
        if finished():
            return code
        time.sleep(interval)
        print(f"--- {datetime.now().strftime('%H:%M:%S')}", flush=True)


# --- logs ------------------------------------------------------------------------------------------
def node_ranks(cluster, kind, pods: list) -> dict[int, str]:
    """Node rank -> pod name, from each pod's newest `node` record."""
    ranks = {}
    for pod in pods:
        nodes = [r for r in records_of(read_log(cluster, kind, pod.metadata.name)) if r.get("event") == "node"]
        if nodes:
            ranks[int(nodes[-1]["node_rank"])] = pod.metadata.name
    return ranks


def pods_to_show(cluster, kind, name: str, rank) -> list[str]:
    pods = job_pods(cluster, kind, name)
    if not pods:
        return []
    if str(rank) == "all":
        return [p.metadata.name for p in pods]
    ranks = node_ranks(cluster, kind, pods)
    if int(rank) in ranks:
        return [ranks[int(rank)]]
    if int(rank) == 0 and len(pods) == 1:  # one pod: it is rank 0 even before its first `node` line
        return [pods[0].metadata.name]
    return []


def _fresh(lines: list[str], mark: list) -> list[str]:
    """The lines (with `timestamps=true` prefixes) not shown yet; `mark` = [newest stamp shown, how
    many lines with that stamp were shown], updated. Reads of a growing log overlap: this drops the overlap."""
    newest, shown = mark or ["", 0]
    out, same = [], 0
    for line in lines:
        stamp, _, body = line.partition(" ")
        if stamp < newest:
            continue
        if stamp == newest:
            same += 1
            if same <= shown:
                continue
            shown += 1
        else:
            newest, shown, same = stamp, 1, 1
        out.append(body)
    mark[:] = [newest, shown]
    return out


def logs(job: Job, cluster, kind) -> int:
    from elastic_launcher.capacity.traces import parse_time

    settings = job.settings.cluster
    name = submitted_name(job, cluster, kind)
    since = int(parse_time(settings.since, "cluster.since")[0]) if settings.since else None
    if str(settings.rank) != "all" and not str(settings.rank).isdigit():
        raise LauncherError(f"cluster.rank={settings.rank!r} must be a node rank (0, 1, ...) or all")
    seen: dict[str, list] = {}  # pod -> the mark of _fresh
    while True:
        shown = pods_to_show(cluster, kind, name, settings.rank)
        if not shown and not settings.follow:
            if not job_pods(cluster, kind, name):
                raise LauncherError(f"no pod of job {name!r} in namespace {cluster.namespace} yet: it is starting or "
                                    f"was deleted; see action=status, or follow with cluster.follow=true")
            raise LauncherError(f"no pod of job {name!r} runs node rank {settings.rank} (yet): the job runs at fewer "
                                f"nodes or is starting; cluster.rank=all shows every pod")
        if settings.follow and len(shown) == 1:  # one pod: stream its log until it ends, then find the next
            _stream(cluster, kind, shown[0], since, seen)
            if _finished(cluster, kind, name):
                return 0
            time.sleep(1)
            continue
        for pod in shown:
            text = read_log(cluster, kind, pod, since_seconds=since, timestamps=True)
            if text is None:
                if not settings.follow:
                    raise LauncherError(f"pod {pod} of job {name!r} is gone (the job was resized or restarted): run "
                                        f"the command again, or follow with cluster.follow=true")
                continue
            for body in _fresh(text.splitlines(), seen.setdefault(pod, [])):
                print(f"[{pod}] {body}" if len(shown) > 1 else body, flush=True)
        if not settings.follow or _finished(cluster, kind, name):
            return 0
        time.sleep(2)


def _stream(cluster, kind, pod: str, since: int | None, seen: dict[str, str]) -> None:
    """Print a pod's log as it grows (follow=true) until the pod's container ends or the pod goes."""
    kwargs = {"container": kind.container, "timestamps": True, "follow": True, "_preload_content": False}
    if since:
        kwargs["since_seconds"] = since
    response = cluster.call("get pods/log", cluster.core.read_namespaced_pod_log, pod, cluster.namespace,
                            tolerate=(404, 400), **kwargs)
    if response is None:
        return
    buffer = b""
    try:
        for chunk in response.stream(4096):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for body in _fresh([raw.decode(errors="replace") for raw in lines], seen.setdefault(pod, [])):
                print(body, flush=True)
    except Exception:  # noqa: BLE001 - the connection ends when the pod does
        pass
    finally:
        response.release_conn()


def _finished(cluster, kind, name: str) -> bool:
    obj = get_job(cluster, kind, name)
    return obj is None or job_phase(obj) in DONE_PHASES


# --- list ------------------------------------------------------------------------------------------
def _age(created: str | None, now: float) -> str:
    from elastic_launcher.cluster.training_progress import duration

    if not created:
        return "-"
    return duration(now - datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp())


def list_jobs(job: Job, cluster) -> int:
    rows = [("job", "kind", "recipe", "phase", "nodes", "step", "age")]
    now = time.time()
    for kind in KINDS.values():
        if not cluster.crd_installed(kind):
            continue
        found = cluster.call(f"list {kind.plural}", cluster.custom.list_namespaced_custom_object, kind.group,
                             kind.version, cluster.namespace, kind.plural,
                             label_selector=MANAGED_BY_SELECTOR)
        for obj in found.get("items", []):
            meta, spec = obj["metadata"], obj.get("spec") or {}
            name = meta["name"]
            policy = spec.get("elasticPolicy") or {}
            pods = job_pods(cluster, kind, name)
            running = sum(p.status.phase == "Running" for p in pods)
            bounds = f"{policy['minReplicas']}..{policy['maxReplicas']}" if policy else "static"
            p = progress(rank0_records(cluster, kind, name, tail_lines=200)) if running else None
            step = f"{p.step}/{p.max_steps or '?'}" if p and p.state != "no progress yet" else "-"
            rows.append((name, kind.kind, (meta.get("labels") or {}).get("elastic-launcher/recipe", "-"),
                         job_phase(obj), f"{running} / {bounds}", step, _age(meta.get("creationTimestamp"), now)))
    if len(rows) == 1:
        print(f"no jobs submitted by this launcher in namespace {cluster.namespace}")
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows))
    return 0
