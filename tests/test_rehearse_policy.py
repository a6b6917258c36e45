"""The rehearsal driver's operator decisions, without processes: which size, and when to scale up."""

import time

import pytest

from elastic_launcher.compose import compose, to_plain
from elastic_launcher.local import LocalJob
from elastic_launcher.plan import make_plan
from elastic_launcher.rehearse import Rehearsal, TraceEvent, parse_trace


def rehearsal(tmp_path, *overrides, min_stable=0.0):
    cfg, _ = compose(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true", *overrides])
    plan = make_plan(to_plain(cfg)["recipes"])
    return Rehearsal(plan, LocalJob(tmp_path, tmp_path, 1), [], min_stable, tmp_path / "log")


def test_largest_allowed_size_that_fits(tmp_path):
    r = rehearsal(tmp_path, "recipes.elastic_policy.replica_discrete_values=[1,3]")
    for available, target in [(0, 0), (1, 1), (2, 1), (3, 3), (5, 3)]:
        r.available = available
        assert r.target() == target


@pytest.mark.parametrize("setting,attribute", [("scaling_timeout", "capacity_since"),
                                               ("scale_up_snooze_time", "last_restart")])
def test_scale_up_waits_for_its_timeouts(tmp_path, setting, attribute):
    r = rehearsal(tmp_path, f"recipes.elastic_policy.{setting}=30")
    now = time.time()
    setattr(r, attribute, now - 10)
    assert not r.may_scale_up(now)
    setattr(r, attribute, now - 31)
    assert r.may_scale_up(now)


def test_anti_thrashing_period_between_resizes(tmp_path):
    r = rehearsal(tmp_path, min_stable=20.0)
    now = time.time()
    r.last_resize = now - 5
    assert not r.may_scale_up(now)
    r.last_resize = now - 25
    assert r.may_scale_up(now)


def test_trace_from_yaml_file_and_default_initial_capacity(tmp_path):
    (tmp_path / "trace.yaml").write_text("- {time: 5.5, nodes: 1}\n- {step: 8, kill: true}\n")
    events = parse_trace(str(tmp_path / "trace.yaml"), max_nodes=3)
    assert events == [TraceEvent(step=0, nodes=3), TraceEvent(time=5.5, nodes=1), TraceEvent(step=8, kill=True)]
    assert events[1].due(step=0, elapsed=6.0) and not events[2].due(step=7, elapsed=100.0)
