"""The rendered HyperPod job under the real elastic agent (`hyperpodrun`, hyperpod-elastic-agent and
torch as the Dockerfile pins them), one agent per simulated node on loopback, driven as the
operator drives it (elastic_launcher/local/hyperpod_agents.py): start at 2 nodes, graceful stop; start at 3 (the
two pods that stayed read their shards from their node-local memory), graceful stops seconds apart;
start at 3, a pod deleted on scale-down (SIGTERM); start at 2, a pod killed without a graceful stop
(its node's memory lost: the survivor's restarted process resumes from the peer copy in its pod's
memory volume, its buddy's shards included); start at 1, finish; shutdown.

It checks what the operator relies on: every graceful stop checkpoints and leaves the agents
`ready` within the graceful timeout, no agent reports `completed` before the last step, every
restart resumes at its new size from the newest checkpoint or peer copy, `/status.progress` names that
checkpoint, the losses and the committed data stream equal a fixed-size run's, no process is left.
"""

import os
import re
import signal
import time
from pathlib import Path

import pytest

from conftest import ROOT, committed_samples, losses, own_processes, records, train, wait_for
from elastic_launcher.local.run import child_pids
from elastic_launcher.local.hyperpod_agents import Container, AgentOperator
from training.contract.checkpoint_dirs import COMPLETE, latest_checkpoint, step_dir, step_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.xdist_group("test_hyperpod_agent")]  # on one worker: its tests share module fixtures
STEPS = 40


def dry_run(work: Path, *overrides: str) -> Container:
    """The tiny recipe's dry run (elastic over 1..3 nodes), its run directory under `work`."""
    from elastic_launcher.cli import main

    assert main(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true",
                 f"recipes.run.output_dir={work / 'run'}", "recipes.training_config.logging.audit_samples=true",
                 f"recipes.training_config.training_args.max_steps={STEPS}", f"output_dir={work / 'dry'}",
                 *overrides]) == 0
    return Container.from_manifest(work / "dry" / "tiny-llama-sft" / "manifest.yaml")


@pytest.fixture(scope="module")
def job(tmp_path_factory, image_python):
    work = tmp_path_factory.mktemp("hyperpod")
    return work, dry_run(work), image_python


def steps_at(run_dir: Path, world_size: int) -> list[int]:
    return [r["step"] for r in records(run_dir) if "loss" in r and r["world_size"] == world_size]


def wait_step(run_dir: Path, at_least: int, world_size: int) -> None:
    wait_for(lambda: max(steps_at(run_dir, world_size), default=0) >= at_least, timeout=120, interval=0.05)


def newest_step(run_dir: Path) -> int:
    return int(latest_checkpoint(run_dir / "checkpoints").name.split("-")[1])


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory, image_python) -> Path:
    """The tiny recipe's STEPS on one node, never stopped, on the agents' torch: what every job of
    this module must equal (its elastic policy, in place or not, leaves the training config alone)."""
    work = tmp_path_factory.mktemp("fixed")
    dry_run(work)
    train(work / "dry" / "tiny-llama-sft" / "configs", work / "run", nodes=1, python=image_python)
    return work / "run"


def assert_matches_a_fixed_size_run(run_dir: Path, fixed: Path) -> None:
    """The committed stream equals a fixed-size run's, on the same torch: every step once, the same
    losses, every sample once."""
    got, want = losses(run_dir), losses(fixed)
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    for step in want:
        assert abs(got[step] - want[step]) <= 1e-5 * abs(want[step]), (step, got[step], want[step])
    samples = committed_samples(run_dir)
    assert samples == committed_samples(fixed)
    flat = [i for step in sorted(samples) for i in samples[step]]
    assert len(flat) == len(set(flat)) == STEPS * 8


def test_resize_2_3_1_under_the_real_agent(job, fixed_run):
    work, container, python = job
    run_dir = work / "run"
    operator = AgentOperator(container, work / "pods", Path(python).parent, cwd=ROOT)
    timings: dict[str, list[float]] = {"stop_to_ready": [], "start_to_step": []}

    def graceful_stop(pods, apart=0.0):
        began = operator.stop(pods, apart=apart)
        ready = operator.wait_status(pods, {"ready"}, timeout=container.graceful_timeout + 10)
        timings["stop_to_ready"].append(ready - began - apart * (len(pods) - 1))
        assert ready - began < container.graceful_timeout + apart * len(pods)

    def start(pods, after_step):
        """Start at len(pods) nodes with the progress the agents report; wait for new steps."""
        progress = operator.progress(operator.pods)
        began = operator.start(pods, progress)
        wait_step(run_dir, after_step + 1, len(pods))
        first = min(r["time"] for r in records(run_dir) if "loss" in r and r["time"] >= began)
        timings["start_to_step"].append(first - began)

    def resumed_from(step, nodes):
        resume = [r for r in records(run_dir) if r.get("event") == "resume"][-1]
        assert (resume["step"], resume["world_size"]) == (step, nodes)
        return resume["read_mb"]

    def progress_names_newest(pods):
        newest = latest_checkpoint(run_dir / "checkpoints").resolve()
        for pod in pods:
            (entry,) = operator.status(pod)["progress"].values()
            assert (Path(entry["progressData"]), entry["progressCount"]) == (newest, newest_step(run_dir))

    try:
        p0, p1, p2 = (operator.add_pod() for _ in range(3))

        # 2 nodes, then a graceful stop of both: checkpoint at the agreed step, agents ready.
        start([p0, p1], 0)
        wait_step(run_dir, 3, 2)
        graceful_stop([p0, p1])
        stopped = newest_step(run_dir)
        assert [r["step"] for r in records(run_dir) if r.get("event") == "stop"] == [stopped]
        progress_names_newest([p0, p1])

        # 3 nodes; the operator's stops reach the pods 3 s apart: nobody reports completed.
        start([p0, p1, p2], stopped)
        read = resumed_from(stopped, 3)
        assert read["node memory"] > 0 and read["shared volume"] > 0, read  # pod 2 holds nothing yet
        wait_step(run_dir, stopped + 3, 3)
        graceful_stop([p2, p0, p1], apart=3.0)
        stopped = newest_step(run_dir)
        assert [r for r in records(run_dir) if r.get("event") == "stop"][-1]["step"] == stopped
        assert not [h for h in operator.history if h[2] == "completed"], operator.history
        assert "waiting up to" in p0.log.read_text()  # the peers of the first stopped pod waited for their own stop
        progress_names_newest([p0, p1, p2])

        # 3 nodes; pod 2 is deleted on scale-down (SIGTERM to its agent): everyone checkpoints, its
        # agent exits, the others wait for the operator's stop.
        start([p0, p1, p2], stopped)
        resumed_from(stopped, 3)
        wait_step(run_dir, stopped + 3, 3)
        deleted_at = time.time()
        operator.remove(p2, signal.SIGTERM)
        p2.proc.wait(timeout=container.graceful_timeout)
        wait_for(lambda: any(r.get("event") == "stop" and r["time"] >= deleted_at for r in records(run_dir)), 30)
        graceful_stop([p0, p1])
        stopped = newest_step(run_dir)
        assert [r for r in records(run_dir) if r.get("event") == "stop"][-1]["step"] == stopped

        # 2 nodes; pod 1's node dies (SIGKILL, no graceful stop) once pod 0 holds a peer copy newer
        # than the checkpoint: pod 0's agent reports the fault, the operator stops it and replaces pod 1.
        start([p0, p1], stopped)
        resumed_from(stopped, 2)
        wait_step(run_dir, stopped + 2, 2)
        copies = operator.node_local(p0.name) / "peer"
        wait_for(lambda: max((step_of(c.parent) for c in copies.glob(f"step-*/{COMPLETE}")), default=0)
                 > newest_step(run_dir), timeout=60, interval=0.01)
        operator.remove(p1, signal.SIGKILL)
        operator.wait_status([p0], {"faulted"}, timeout=60)
        operator.fault_count += 1
        operator.stop([p0], graceful=False)
        operator.wait_status([p0], {"ready"}, timeout=30)
        p3 = operator.add_pod()
        stopped = newest_step(run_dir)
        wait_for(lambda: not operator.node_local(p1.name).exists(), timeout=30)

        # 1 node to the end: the only completion. The restarted process resumes from the peer copy,
        # not the older checkpoint: its own shards and the dead node's (pod 0 was its buddy), all from
        # its pod's memory volume, which outlived the process.
        start([p0], stopped)
        resume = [r for r in records(run_dir) if r.get("event") == "resume"][-1]
        assert resume["source"] == "peers" and resume["step"] > stopped and resume["world_size"] == 1, resume
        assert resume["read_mb"]["node memory"] > 0 and "shared volume" not in resume["read_mb"], resume
        operator.wait_status([p0], {"completed"}, timeout=180)
        assert max(losses(run_dir)) == STEPS
        for pod in (p0, p3):
            operator.shutdown(pod)
            assert pod.proc.wait(timeout=30) == 0
    finally:
        operator.close()

    # No agent ever said completed before the job ended.
    last_step = max(r["time"] for r in records(run_dir) if r.get("step") == STEPS and "loss" in r)
    completions = [(t, name) for t, name, status in operator.history if status == "completed"]
    assert completions and all(t >= last_step and name == "pod-0" for t, name in completions), operator.history
    assert not any(status == "faulted" and name != "pod-0" for _, name, status in operator.history)

    assert_matches_a_fixed_size_run(run_dir, fixed_run)

    # Restarts agreed with the agent's progress; nothing is left running.
    assert not any(re.search(r"warning: the agent's progress", p.log.read_text()) for p in operator.pods)
    wait_for(lambda: not own_processes(work / "pods"), timeout=30)
    loads = [(sum(v for k, v in r.items() if k.startswith("load_")), r["read_mb"])
             for r in records(run_dir) if r.get("event") == "resume"]
    print(f"\nstop -> agents ready (s): {[round(t, 2) for t in timings['stop_to_ready']]}; "
          f"/start -> first step (s): {[round(t, 2) for t in timings['start_to_step']]}; "
          f"of it the load (s, MB from node memory / shared volume): "
          f"{[(round(s, 2), '/'.join(str(v) for v in mb.values())) for s, mb in loads]}")
    assert os.path.isdir(step_dir(run_dir / "checkpoints", STEPS))


def workers(pod) -> list[int]:
    """The worker processes the pod's agent runs."""
    return child_pids(pod.proc.pid, running=True)


def start_and_wait(operator: AgentOperator, run_dir: Path, pods, after_step: int, steps: int = 3, apart: float = 0.0) -> None:
    operator.start(pods, operator.progress(operator.pods), apart=apart)
    wait_step(run_dir, after_step + steps, len(pods))


@pytest.fixture
def in_place_job(tmp_path, image_python):
    return tmp_path, dry_run(tmp_path, "recipes.elastic_policy.in_place=true",
                             "recipes.elastic_policy.graceful_shutdown_timeout=60"), image_python


def test_resize_in_place_2_3_2_3_1_under_the_real_agent(in_place_job, fixed_run):
    """`elastic_policy.in_place`: the agents start their workers once; every /stop leaves them alive at
    the agent's barrier and every /start, on the job's one master port, resizes them in place. The job
    grows 2 -> 3 twice with two workers staying and a fresh pod's joining: first rank 0 stays where it
    was and the new pod's /start comes last (its worker joins late), then the new pod takes rank 0 and
    comes first (it hosts the store its peers' old group used the port of). Between the two it shrinks
    to 2 with rank 0 moved to the other staying pod; the stops reach the pods 3 s apart. Then the
    joined pod is deleted while training (SIGTERM: everyone checkpoints, its agent leaves), and pod 0
    finishes alone, reading the others' shards from the shared volume. No worker of a staying pod is
    ever restarted, and the run equals a fixed-size one."""
    work, container, python = in_place_job
    assert "--inprocess-restart" in container.args
    run_dir = work / "run"
    operator = AgentOperator(container, work / "pods", Path(python).parent, cwd=ROOT)
    try:
        pods = [operator.spawn_pod() for _ in range(4)]  # four agents and workers starting at once: each
        operator.wait_status(pods, {"ready"}, timeout=4 * 90)  # add_pod's 90 s; their workers wait at the barrier
        p0, p1, p2, p3 = pods
        first = {pod.name: workers(pod) for pod in pods}
        assert all(len(pids) == 1 for pids in first.values()), first

        def stop(job, apart=0.0):
            operator.stop(job, apart=apart)
            operator.wait_status(job, {"ready"}, timeout=container.graceful_timeout + 10)
            return newest_step(run_dir)

        def grow(job, stopped, apart):
            start_and_wait(operator, run_dir, job, stopped, apart=apart)
            resume = [r for r in records(run_dir) if r.get("event") == "resume"][-1]
            assert (resume["step"], resume["world_size"]) == (stopped, 3)
            assert resume["read_mb"]["node memory"] > 0 and resume["read_mb"]["shared volume"] > 0, resume

        start_and_wait(operator, run_dir, [p0, p1], 0)
        grow([p0, p1, p2], stop([p0, p1]), apart=1.0)
        stopped = stop([p2, p0, p1], apart=3.0)
        start_and_wait(operator, run_dir, [p1, p0], stopped)
        grow([p3, p1, p0], stop([p1, p0]), apart=1.0)
        assert not [h for h in operator.history if h[2] in ("completed", "faulted")], operator.history

        deleted_at = time.time()
        operator.remove(p3, signal.SIGTERM)
        p3.proc.wait(timeout=container.graceful_timeout)
        wait_for(lambda: any(r.get("event") == "stop" and r["time"] >= deleted_at for r in records(run_dir)), 30)
        stopped = stop([p0, p1])

        operator.start([p0], operator.progress([p0, p1]))
        operator.wait_status([p0], {"completed"}, timeout=180)
        resume = [r for r in records(run_dir) if r.get("event") == "resume"][-1]
        assert (resume["step"], resume["world_size"]) == (stopped, 1)
        assert resume["read_mb"]["shared volume"] > 0, resume  # what the other pods held

        # The staying pods' workers are the ones their agents started first, and said so each start.
        assert workers(p1) == first["pod-1"] and workers(p2) == first["pod-2"]
        starts = [line for line in p0.log.read_text().splitlines() if "in place: start" in line]
        assert len(starts) == 5 and "kept its imports and data" in starts[-1], starts
        for pod in (p0, p1, p2):
            operator.shutdown(pod)
            assert pod.proc.wait(timeout=30) == 0
    finally:
        operator.close()
    assert not any(status == "faulted" for _, _, status in operator.history), operator.history
    assert_matches_a_fixed_size_run(run_dir, fixed_run)
    wait_for(lambda: not own_processes(work / "pods"), timeout=30)


def test_a_rank_that_never_reaches_the_barrier_falls_back_to_a_process_restart(tmp_path, image_python, fixed_run):
    """In place, pod 1's worker hangs (SIGSTOP) while training at 2 nodes: at /stop neither worker can
    reach the barrier (pod 0's waits for pod 1's in a collective), so after the in-process timeout each
    agent restarts its workers, which resume from the newest complete checkpoint or peer copy. Nothing
    is lost: the steps since then are done again, and the run equals a fixed-size one. The timeout (the
    graceful one) is 30 s, half the other in-place job's: this test waits it out."""
    work, python = tmp_path, image_python
    container = dry_run(work, "recipes.elastic_policy.in_place=true", "recipes.elastic_policy.graceful_shutdown_timeout=30")
    run_dir = work / "run"
    operator = AgentOperator(container, work / "pods", Path(python).parent, cwd=ROOT)
    try:
        p0, p1 = operator.add_pod(), operator.add_pod()
        first = workers(p0) + workers(p1)
        start_and_wait(operator, run_dir, [p0, p1], 0, steps=6)
        (hung,) = workers(p1)
        os.kill(hung, signal.SIGSTOP)
        hung_at = max(steps_at(run_dir, 2))
        operator.stop([p0, p1])
        operator.wait_status([p0, p1], {"ready"}, timeout=3 * container.graceful_timeout + 30)
        restarted = workers(p0) + workers(p1)
        assert not set(restarted) & set(first), (first, restarted)
        resumed = newest_step(run_dir)
        assert resumed < hung_at  # the stop could not checkpoint: the last periodic one is the newest

        operator.start([p0, p1], operator.progress([p0, p1]))
        operator.wait_status([p0, p1], {"completed"}, timeout=180)
        resume = [r for r in records(run_dir) if r.get("event") == "resume"][-1]
        # From the newest state the two nodes hold whole: a peer copy newer than the checkpoint, if
        # one completed before the hang, else the checkpoint.
        assert resumed <= resume["step"] <= hung_at and resume["world_size"] == 2
        assert resume["source"] == ("peers" if resume["step"] > resumed else "durable")
        assert "a fresh process" in [line for line in p0.log.read_text().splitlines() if "in place: start" in line][-1]
    finally:
        operator.close()
    assert_matches_a_fixed_size_run(run_dir, fixed_run)
    wait_for(lambda: not own_processes(work / "pods"), timeout=30)
