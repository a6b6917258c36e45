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
    # the alternatives a user weighs: other min/max, every count vs the scale-config sizes, timeouts, snooze
    assert {"discrete 4..8, timeout 0s, snooze 0s", "step 4..16, timeout 600s, snooze 0s",
            "discrete 4..16, timeout 2400s, snooze 3600s"} <= set(outcomes)
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
    # the first failure hits the job (all 16 free nodes are its); it restarts on 12 of the 15 left, so
    # the next two take spare nodes
    assert elastic["failures"] == 1 and elastic["lost"]["failure"] > 0 and elastic["redone_steps"] > 0
    assert set(elastic["steps_by_nodes"]) == {"16", "12"}
    # steps per node count are the committed ones: redone steps count once
    assert sum(elastic["steps_by_nodes"].values()) == pytest.approx(elastic["steps"])


def outcome(*overrides, policy="elastic"):
    """One policy's Outcome (with its timeline) for the blog job on an inline trace."""
    from elastic_launcher.capacity.traces import parse_trace
    from elastic_launcher.config.compose import compose
    from elastic_launcher.job import load_job
    from elastic_launcher.simulate.simulator import Simulation, candidates, modelled_costs, Throughput

    overrides = [*BLOG_JOB, *overrides]
    job = load_job(compose(overrides)[0], "llama/llama3_3_70b_sft", overrides)
    s, plan = job.settings.simulate, job.plan
    trace = parse_trace(s.capacity, plan.policy.max_nodes, "simulate.capacity", s.repeat_daily, 86400 * 60)
    throughput = Throughput({1: s.tokens_per_s_per_node / plan.sizes[0].tokens_per_step}, s.scaling_efficiency, "")
    chosen = next(c for c in candidates(plan, False, 0.0) if c.name == policy)
    ta = plan.sizes[0].config.training_config.training_args
    return Simulation(chosen.name, chosen.sizes, plan, trace, throughput, modelled_costs(plan, s), ta.max_steps,
                      86400 * 60, policy=chosen.policy).run()


def held_beyond_capacity(o) -> list:
    """Timeline points where the job held more nodes than were free, other than while it stops (a
    graceful stop keeps its pods until they exit)."""
    return [p for p in o.timeline if p.held > p.capacity and p.phase not in ("stopping", "failing")]


def test_a_relaunch_takes_the_capacity_of_its_own_moment(launch):
    """Growing 8 -> 16 at 1 h: the stop (30 s + an 847 GB checkpoint at 5 GB/s) is still running
    when capacity falls to 4 at 63 min. The job relaunches at 4, never on the 16 nodes that are gone."""
    o = outcome("recipes.elastic_policy.scaling_timeout=0",
                "simulate.capacity=[{time:0,nodes:8},{time:1h,nodes:16},{time:63m,nodes:4}]")
    assert not held_beyond_capacity(o), held_beyond_capacity(o)
    assert o.finished and set(o.steps_by_nodes) == {8, 4}


def test_a_kill_during_a_graceful_stop_is_a_failure(launch):
    """16 -> 8 at 2 h; a node dies at 2h03m, mid-stop: the stop's checkpoint is lost (back to the last
    periodic one), and the job comes back on the 7 nodes left, at the largest allowed size."""
    o = outcome("simulate.capacity=[{time:0,nodes:16},{time:2h,nodes:8},{time:2h3m,kill:true}]",
                "recipes.training_config.checkpoint.save_steps=50")
    assert o.failures == 1 and o.redone_steps > 0 and not held_beyond_capacity(o)
    assert max(n for n in o.steps_by_nodes if o.steps_by_nodes[n] > 0) == 16 and 6 in o.steps_by_nodes


def test_a_kill_takes_a_spare_node_before_the_jobs(launch):
    """20 nodes free, the job at its max of 16: a dead node is one of the 4 spare ones."""
    o = outcome("simulate.capacity=[{time:0,nodes:20},{time:1h,kill:true}]")
    assert o.failures == 0 and o.resizes == 0 and o.finished


def test_a_stop_for_lack_of_capacity_is_charged_as_a_stop(launch):
    o = outcome("simulate.capacity=[{time:0,nodes:8},{time:1h,nodes:2},{time:3h,nodes:8}]")
    assert o.resizes == 0 and o.lost["stop"] > 0 and o.lost["resize"] == 0 and o.finished


def test_the_timeline_trains_only_while_running(launch):
    """Each timeline point holds the progress at its own time: across a span the job spent starting,
    down the progress does not move (nor grows while stopping: a failure sets it back), and it grows
    across running spans, so the chart never draws steps trained during a start-up."""
    o = outcome("simulate.capacity=[{time:0,nodes:16},{time:2h,nodes:8},{time:2h3m,kill:true},{time:5h,nodes:16}]",
                "recipes.training_config.checkpoint.save_steps=50")
    assert o.failures == 1 and o.resizes >= 1
    pairs = list(zip(o.timeline, o.timeline[1:]))
    assert all(b.steps == a.steps for a, b in pairs if a.phase in ("starting", "down"))
    assert all(b.steps <= a.steps for a, b in pairs if a.phase in ("stopping", "failing"))  # a kill mid-stop sets it back
    assert all(b.steps > a.steps for a, b in pairs if a.phase == "running" and b.phase != "failing")
    assert o.timeline[0].steps == 0


def test_the_chart_shows_the_elastic_job_where_it_matters(launch, tmp_path):
    """On flickering capacity a baseline never finishes within the 60-day horizon: the chart still
    ends just after the elastic job does, draws the elastic job last, and marks its resizes,
    its starting/stopping spans and the idle nodes; the title names job, trace and policy."""
    from elastic_launcher.simulate.chart import chart_data

    outcomes = [outcome("simulate.capacity=spot_flicker.csv", "simulate.repeat_daily=true", policy=name)
                for name in ("elastic", "static at min", "static at max")]
    data = chart_data(outcomes, "llama3-3-70b-sft on spot_flicker.csv: elastic", 524288, daily=True)
    elastic = outcomes[0]
    assert elastic.finished and any(o.hours > 10 * elastic.hours for o in outcomes[1:])  # a baseline runs far longer
    assert data["x_end_h"] == pytest.approx(elastic.hours * 1.08)
    assert data["series"][-1]["policy"] == "elastic"
    assert [r[0] for r in data["resizes"]] and len(data["resizes"]) == elastic.resizes
    assert {phase for *_, phase in data["busy_spans"]} >= {"starting", "stopping"}
    assert data["idle"] and all(free > held for *_, held, free in data["idle"])
    assert any("beyond the chart" in s["label"] for s in data["series"][:-1])
    assert data["daily"]


@pytest.mark.parametrize("trace,message", [
    ("[{time:2h,nodes:4},{time:1h,nodes:8}]", "simulate.capacity[1].time='1h' comes before the previous event"),
    ("[{time:0,nodes:-2}]", "simulate.capacity[0].nodes=-2 must be a whole number >= 0"),
    ("[{time:5x,nodes:4}]", "simulate.capacity[0].time='5x' has an unknown unit 'x'"),
    ("[{time:25:00,nodes:4}]", "simulate.capacity[0].time='25:00' is not a clock time"),
    ("no_such_trace", "simulate.capacity='no_such_trace' is neither a list of events nor a trace file"),
    ("night_relase", "did you mean simulate.capacity=night_release?"),
    ("/tmp/nope/trace.csv", "simulate.capacity='/tmp/nope/trace.csv': no such file"),
    ("[{time:0,nodes:3},{time:1h,nodes:2}]", "never frees more than 3 nodes, fewer than the policy's smallest size (4)"),
])
def test_bad_traces_are_one_line_errors(launch, trace, message):
    code, out, err = launch(*BLOG_JOB, f"simulate.capacity={trace}")
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and message in err


@pytest.mark.parametrize("name,text,message", [
    ("bad.yaml", "- {time: 0, nodes: 4}\n- {time: 1h nodes: 8\n", "bad.yaml line 2 is not valid YAML"),
    ("bad.csv", "time,nodes\n0,4\n3600,8,9\n", "bad.csv line 3 has more columns than its header"),
])
def test_bad_trace_files_are_one_line_errors(launch, tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    code, out, err = launch(*BLOG_JOB, f"simulate.capacity={tmp_path / name}")
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_clock_times_without_repeat_daily_are_flagged(launch, tmp_path):
    code, out, err = launch(*BLOG_JOB, "simulate.capacity=night_release")
    assert code == 0
    assert "warning: simulate.capacity uses clock times but repeat_daily is off" in err
    assert "simulate.repeat_daily=true" in err


def test_the_sweep_table_shows_the_recipes_policy_as_itself_and_explains_its_marks(launch, tmp_path):
    outcomes, out = simulate(launch, tmp_path, "simulate.capacity=spot_flicker.csv", "simulate.repeat_daily=true",
                             "simulate.sweep=true")
    names = [line.split("  ")[0] for line in out.splitlines()[2:]]
    assert "elastic" in names and "static at min" in names  # never hidden under another policy's name
    assert "+N alike: N more sweep policies with the same finish time" in out
    assert "1440.0+: not finished within the simulated horizon (simulate.horizon_days=60)" in out


def test_simulate_never_imports_torch(tmp_path):
    probe = ("import sys; from elastic_launcher.cli import main; code = main(sys.argv[1:]); "
             "assert code == 0; bad = {'torch', 'kubernetes'} & set(sys.modules); assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", probe, *BLOG_JOB, "simulate.capacity=night_release",
                             "simulate.repeat_daily=true", f"output_dir={tmp_path}"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_a_project_relative_trace_path_works_from_any_directory(tmp_path, monkeypatch):
    """`local.trace=traces/demo.yaml`, as the docs write it, from a directory that is not the
    project's (and so from an installed copy, whose ROOT is its own)."""
    from elastic_launcher import ROOT
    from elastic_launcher.capacity.traces import parse_trace

    monkeypatch.chdir(tmp_path)
    from_here = parse_trace("traces/demo.yaml", 3)
    monkeypatch.chdir(ROOT)
    assert from_here == parse_trace("traces/demo.yaml", 3) == parse_trace("demo", 3)


def test_peer_copies_price_one_dead_node_at_the_step_since_the_copy_and_two_at_the_checkpoint(launch, tmp_path):
    """With a copy every step, a node that dies costs under a step (the copy of the last one is on its
    buddy); two at once may be a node and its buddy, so they cost what they cost without copies: every
    step since the last checkpoint (here the start: saves 1,000 steps apart). The summary says both."""
    trace = "simulate.capacity=[{time:0,nodes:16},{time:3h,kill:%s}]"
    common = ("recipes.elastic_policy.min_nodes=8", "recipes.training_config.checkpoint.save_steps=1000")
    one = {p: outcome(trace % "true", *common, f"recipes.training_config.checkpoint.peer_steps={p}") for p in (0, 1)}
    assert one[0].failures == one[1].failures == 1
    assert one[1].redone_steps < 1 < 100 < one[0].redone_steps
    assert one[1].lost["failure"] < one[0].lost["failure"] / 10  # the restart itself costs the same
    two = {p: outcome(trace % 2, *common, f"recipes.training_config.checkpoint.peer_steps={p}") for p in (0, 1)}
    assert two[1].redone_steps == pytest.approx(two[0].redone_steps) and two[1].redone_steps > 100
    _, out = simulate(launch, tmp_path, trace % "true", *common)  # on by default at 8..16 nodes: they fit
    assert (f"elastic's 1 failure, steps trained again: {one[1].redone_steps:,.1f} with peer copies "
            f"({one[1].lost['failure']:,.1f} GPU-h), {one[0].redone_steps:,.1f} without "
            f"({one[0].lost['failure']:,.1f} GPU-h); this recipe has them on") in out, out
