"""The operator's sizing decisions, shared by the rehearsal and the simulator: which size, when to
shrink, when to grow, when to restart after a failure."""

import subprocess
import sys

import pytest

from elastic_launcher.capacity.sizing_policy import Decision, Operator
from elastic_launcher.capacity.traces import TraceEvent, parse_trace
from elastic_launcher.config.compose import compose, to_plain
from elastic_launcher.errors import LauncherError
from elastic_launcher.local.driver import Rehearsal
from elastic_launcher.local.run import LocalJob
from elastic_launcher.planning.plan import make_plan


def plan(*overrides):
    cfg, _ = compose(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true", *overrides])
    return make_plan(to_plain(cfg)["recipes"])


def operator(*overrides, min_stable=0.0):
    p = plan(*overrides)
    return Operator([s.nodes for s in p.sizes], p.policy, min_stable)


def test_largest_allowed_size_that_fits():
    op = operator("recipes.elastic_policy.replica_discrete_values=[1,3]")
    for available, target in [(0, 0), (1, 1), (2, 1), (3, 3), (5, 3)]:
        op.set_capacity(available, now=0)
        assert op.target() == target


def test_start_shrink_at_once_and_stop_when_nothing_fits():
    op = operator()
    op.set_capacity(2, now=0)
    assert op.decide(0) == Decision("launch", 2, "start")
    op.launched(2, now=0)
    op.set_capacity(1, now=5)
    assert op.decide(5) == Decision("resize", 1, "capacity 1 < 2 nodes")
    op.stopped(6)
    op.launched(1, now=6)
    op.set_capacity(0, now=9)
    assert op.decide(9).action == "stop"


@pytest.mark.parametrize("setting", ["scaling_timeout", "scale_up_snooze_time"])
def test_scale_up_waits_for_its_timeouts(setting):
    op = operator(f"recipes.elastic_policy.{setting}=30")
    op.set_capacity(1, now=0)
    op.launched(1, now=0)
    op.set_capacity(3, now=0)
    assert op.decide(10) is None and op.next_decision_at(10) == 30
    assert op.decide(31) == Decision("resize", 3, "capacity for 3 nodes")


def test_anti_thrashing_period_between_resizes():
    op = operator(min_stable=20.0)
    op.set_capacity(1, now=0)
    op.launched(1, now=0)
    op.stopped(100)
    op.launched(1, now=100)
    op.set_capacity(2, now=101)
    assert op.decide(105) is None and op.next_decision_at(105) == 120
    assert op.decide(121).nodes == 2


def test_a_failed_job_restarts_after_faulty_timeout():
    op = operator("recipes.elastic_policy.faulty_timeout=60")
    op.set_capacity(2, now=0)
    op.launched(2, now=0)
    op.lose_node()
    op.failed(10)
    assert op.decide(30) is None and op.next_decision_at(30) == 70
    assert op.decide(70) == Decision("launch", 1, "failure recovery")


def test_the_rehearsal_decides_with_the_operator(tmp_path):
    p = plan("recipes.elastic_policy.replica_discrete_values=[1,3]")
    r = Rehearsal(p, LocalJob(tmp_path, tmp_path, 1), [], 0.0, tmp_path / "log", max_retries=3)
    assert isinstance(r.operator, Operator) and r.operator.allowed == [1, 3]


class FailingJob(LocalJob):
    """A job whose every launch exits 1 at once, as one whose rank 0 cannot host its store does."""

    def start(self, nodes, log, pause_at=()):
        self.launches = getattr(self, "launches", 0) + 1
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])


def test_the_rehearsal_fails_a_job_past_its_retry_count_as_the_operator_does(tmp_path):
    """A job that fails at every launch is restarted cluster.job_max_retry_count times, then failed
    with one line naming the count, the exit code and the logs, not relaunched until local.timeout."""
    p = plan("recipes.elastic_policy.faulty_timeout=0")
    job = FailingJob(tmp_path, tmp_path, 1)
    r = Rehearsal(p, job, [TraceEvent(step=0, nodes=2)], 0.0, tmp_path / "torchrun.log", max_retries=2)
    with pytest.raises(LauncherError) as failed:
        r.run(timeout=60)
    assert job.launches == 3
    assert str(failed.value) == (f"the job failed 3 times, the last with exit code 1 at step 0: past "
                                 f"cluster.job_max_retry_count=2, the operator fails it (see {tmp_path / 'torchrun.log'}); "
                                 f"fix the cause, or raise cluster.job_max_retry_count")


def test_trace_from_yaml_file_and_default_initial_capacity(tmp_path):
    (tmp_path / "trace.yaml").write_text("- {time: 5.5, nodes: 1}\n- {step: 8, kill: true}\n")
    events = parse_trace(str(tmp_path / "trace.yaml"), max_nodes=3)
    assert events == [TraceEvent(step=0, nodes=3), TraceEvent(time=5.5, nodes=1), TraceEvent(step=8, kill=True)]
    assert events[1].due(step=0, elapsed=6.0) and not events[2].due(step=7, elapsed=100.0)


def test_a_local_jobs_master_port_is_its_own_and_outside_the_ephemeral_range():
    """The agents' operator holds one master port for a job's life, free between sizes: no outgoing
    connection (whose local ports come from the ephemeral range) and no other job on this machine may
    take it meanwhile, or rank 0 cannot host the next size's store."""
    from elastic_launcher.local.hyperpod_agents import MasterPort, _ephemeral_ports

    ephemeral = _ephemeral_ports()
    ports = [MasterPort() for _ in range(20)]
    try:
        assert len({p.port for p in ports}) == len(ports)
        assert not any(p.port in ephemeral for p in ports)
    finally:
        for p in ports:
            p.release()
