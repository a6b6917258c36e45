"""The operator's sizing decisions, shared by the rehearsal and the simulator: which size, when to
shrink, when to grow, when to restart after a failure."""

import pytest

from elastic_launcher.capacity.sizing_policy import Decision, Operator
from elastic_launcher.capacity.traces import TraceEvent, parse_trace
from elastic_launcher.config.compose import compose, to_plain
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
    r = Rehearsal(p, LocalJob(tmp_path, tmp_path, 1), [], 0.0, tmp_path / "log")
    assert isinstance(r.operator, Operator) and r.operator.allowed == [1, 3]


def test_trace_from_yaml_file_and_default_initial_capacity(tmp_path):
    (tmp_path / "trace.yaml").write_text("- {time: 5.5, nodes: 1}\n- {step: 8, kill: true}\n")
    events = parse_trace(str(tmp_path / "trace.yaml"), max_nodes=3)
    assert events == [TraceEvent(step=0, nodes=3), TraceEvent(time=5.5, nodes=1), TraceEvent(step=8, kill=True)]
    assert events[1].due(step=0, elapsed=6.0) and not events[2].due(step=7, elapsed=100.0)
