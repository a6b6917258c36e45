"""The capacity simulator: the blog's arithmetic, policies ranked on flickering capacity, clear
errors for bad traces, and no torch on its path. (Its prediction of a real rehearsal is checked in
test_rehearsal.py, beside the rehearsal it predicts.)"""

import json
import subprocess
import sys

import pytest

from conftest import ROOT

BLOG_JOB = ["recipes=llama/llama3_3_70b_sft", "recipes.elastic_policy.is_elastic=true",
            "recipes.elastic_policy.min_nodes=4", "recipes.elastic_policy.max_nodes=16", "action=simulate"]


def simulate(launch, tmp_path, *overrides):
    code, out, err = launch(*BLOG_JOB, *overrides)
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "llama3-3-70b-sft" / "simulation" / "simulation.json").read_text())
    return {o["policy"]: o for o in report["outcomes"]}, out


def test_the_blogs_spare_nodes_are_idle_for_a_static_job_and_absorbed_by_an_elastic_one(launch, tmp_path):
    """32 p5 nodes, the job at 4 (min) to 16 (max), 12 more nodes free around the clock: a static job
    at 4 leaves 12 x 8 GPUs x 24 h = 2,304 GPU-hours idle a day; the elastic job uses them all and
    its report itemizes what it lost (here only its start: the capacity never moves)."""
    outcomes, out = simulate(launch, tmp_path, "simulate.capacity=blog_spare_nodes")
    static, elastic = outcomes["static at min"], outcomes["elastic"]
    assert static["sizes"] == [4] and static["idle_gpu_hours_per_day"] == pytest.approx(2304, rel=1e-9)
    assert elastic["idle_gpu_hours_per_day"] == pytest.approx(0, abs=1e-9) and elastic["resizes"] == 0
    assert elastic["lost"]["resize"] == 0 and elastic["lost"]["start"] == pytest.approx(16 * 8 * 180 / 3600)
    assert elastic["gpu_hours_used"] == pytest.approx(elastic["gpu_hours_productive"] + elastic["lost"]["start"])
    assert elastic["hours"] < static["hours"] / 3  # 16 nodes against 4
    assert "absorbs 2,304 of its 2,304 idle GPU-hours per day" in out
    assert (tmp_path / "out" / "llama3-3-70b-sft" / "simulation" / "simulation.png").stat().st_size > 10_000


def test_night_capacity_is_absorbed_with_two_resizes_a_day(launch, tmp_path):
    outcomes, _ = simulate(launch, tmp_path, "simulate.capacity=night_release", "simulate.repeat_daily=true",
                           "recipes.training_config.training_args.max_steps=5000")
    elastic, at_min, at_max = outcomes["elastic"], outcomes["static at min"], outcomes["static at max"]
    assert elastic["finished"] and elastic["hours"] < at_max["hours"] < at_min["hours"]
    days = elastic["hours"] / 24
    assert elastic["resizes"] == pytest.approx(2 * days, abs=1)  # down at 08:00, up at 20:00
    assert set(elastic["steps_by_nodes"]) == {"4", "16"}
    assert elastic["lost"]["resize"] > 0 and elastic["idle_gpu_hours_per_day"] < at_min["idle_gpu_hours_per_day"] / 10


def test_a_sweep_ranks_policies_and_flags_the_ones_that_thrash(launch, tmp_path):
    outcomes, out = simulate(launch, tmp_path, "simulate.capacity=spot_flicker.csv", "simulate.repeat_daily=true",
                             "simulate.sweep=true")
    assert len(outcomes) > 20
    flagged = [o for o in outcomes.values() if o["resizes_cost_more_than_they_gain"]]
    assert flagged and all(o["resizes"] > outcomes["elastic"]["resizes"] / 2 for o in flagged)
    best = min(outcomes.values(), key=lambda o: o["hours"])
    assert best["hours"] < outcomes["elastic"]["hours"] and best["resizes"] < outcomes["elastic"]["resizes"]
    assert out.splitlines()[2].startswith(best["policy"])  # the table lists the fastest first


def test_a_node_failure_costs_the_steps_since_the_last_checkpoint(launch, tmp_path):
    outcomes, _ = simulate(launch, tmp_path, "simulate.capacity=preemption_burst",
                           "recipes.training_config.checkpoint.save_steps=100",
                           "recipes.training_config.training_args.max_steps=3000")
    elastic = outcomes["elastic"]
    assert elastic["failures"] == 3 and elastic["lost"]["failure"] > 0
    assert sum(elastic["steps_by_nodes"].values()) > elastic["steps"]  # some steps ran twice


@pytest.mark.parametrize("trace,message", [
    ("[{time:2h,nodes:4},{time:1h,nodes:8}]", "simulate.capacity[1].time='1h' comes before the previous event"),
    ("[{time:0,nodes:-2}]", "simulate.capacity[0].nodes=-2 must be a whole number >= 0"),
    ("[{time:5x,nodes:4}]", "simulate.capacity[0].time='5x' has an unknown unit 'x'"),
    ("[{time:25:00,nodes:4}]", "simulate.capacity[0].time='25:00' is not a clock time"),
    ("no_such_trace", "simulate.capacity='no_such_trace' is neither a list of events nor a trace file"),
])
def test_bad_traces_are_one_line_errors(launch, trace, message):
    code, out, err = launch(*BLOG_JOB, f"simulate.capacity={trace}")
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and message in err


def test_simulate_never_imports_torch(tmp_path):
    probe = ("import sys; from elastic_launcher.cli import main; code = main(sys.argv[1:]); "
             "assert code == 0; bad = {'torch', 'kubernetes'} & set(sys.modules); assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", probe, *BLOG_JOB, "simulate.capacity=night_release",
                             "simulate.repeat_daily=true", f"output_dir={tmp_path}"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
