"""The local elastic rehearsal: a 2 -> 3 -> 1 -> 2 capacity trace plus a node failure, compared with
a fixed-size run of the same steps."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, bucket, committed_samples, interruptible, losses, own_processes, records, wait_for
from training.contract.buckets import checkpoint_steps
from training.contract.checkpoint_dirs import latest_checkpoint, step_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.xdist_group("test_rehearsal")]  # on one worker: its tests share module fixtures
STEPS = 36


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, s3_server):
    """The demo trace with every checkpoint in a bucket (checkpoint.uri; a volume's are every other
    rehearsal's): the rehearsal and its fixed-size reference each under a prefix of their own."""
    from elastic_launcher.cli import main

    tmp = tmp_path_factory.mktemp("rehearsal")
    with bucket(s3_server, "rehearsal") as name:
        code = main(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true", "action=rehearse",
                     f"local.trace={ROOT / 'traces' / 'demo.yaml'}", f"local.run_dir={tmp / 'run'}",
                     f"recipes.training_config.training_args.max_steps={STEPS}", "local.timeout=500",
                     f"+recipes.training_config.checkpoint.uri=s3://{name}/rehearsals", f"output_dir={tmp / 'out'}"])
        steps = [checkpoint_steps("test", f"s3://{name}/rehearsals/run{part}") for part in ("", "/fixed")]
    return code, tmp / "run", tmp / "run" / "fixed", steps


def test_rehearsal_completes_and_matches_the_fixed_run(rehearsal):
    code, run_dir, fixed_dir, (steps, fixed_steps) = rehearsal
    assert code == 0
    assert not (run_dir / "checkpoints").exists() and not (fixed_dir / "checkpoints").exists()
    assert steps[-1] == fixed_steps[-1] == STEPS  # in the bucket, each under its own prefix
    resumes = [r for r in records(run_dir) if r.get("event") == "resume"]
    # The resizes read their checkpoint from the bucket (and the node memory tier); the node failure at
    # step 26 resumes from the peer copies in the survivor's memory (the last save was at step 18).
    assert [r["source"] for r in resumes] == ["durable"] * 3 + ["peers", "durable"]
    assert all(r["read_mb"]["bucket"] > 0 for r in resumes if r["source"] == "durable")
    assert resumes[3]["read_mb"]["node memory"] > 0 and "bucket" not in resumes[3]["read_mb"]
    assert sorted(losses(run_dir)) == list(range(1, STEPS + 1))
    samples, reference = committed_samples(run_dir), committed_samples(fixed_dir)
    assert samples == reference
    flat = [i for step in sorted(samples) for i in samples[step]]
    assert len(flat) == len(set(flat)) == STEPS * 8
    got, want = losses(run_dir), losses(fixed_dir)
    assert max(abs(got[s] - want[s]) / abs(want[s]) for s in want) <= 1e-5
    sizes = {r["world_size"] for r in records(run_dir) if "loss" in r}
    assert sizes == {1, 2, 3}
    assert not list(run_dir.glob("release-*"))  # the step markers the driver used are gone


def test_failure_steps_are_recomputed_not_lost_or_doubled(rehearsal):
    _, run_dir, fixed_dir, _ = rehearsal
    audit = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in audit]
    redone = sorted(s for s in set(steps) if steps.count(s) > 1)
    # The kill comes after step 26: trained again are the steps after the peer copy it resumed from
    # (at most the one whose copy was in flight; 8 from the resize's checkpoint without the copies).
    failure = [r for r in records(run_dir) if r.get("event") == "resume"][3]
    assert failure["source"] == "peers" and redone == list(range(failure["step"] + 1, 27)) and len(redone) <= 1
    fixed = committed_samples(fixed_dir)
    for record in audit:  # every attempt at a step, lost or committed, read the same samples
        assert record["sample_ids"] == fixed[record["step"]]


def test_timeline_and_report_show_every_transition(rehearsal):
    _, run_dir, _, _ = rehearsal
    timeline = json.loads((run_dir / "timeline.json").read_text())
    kinds = [e["event"] for e in timeline]
    assert [e["nodes"] for e in timeline if e["event"] == "launch"] == [2, 3, 1, 2, 1, 2]
    assert kinds.count("signal") == 4 and kinds.count("kill") == 1 and kinds.count("failure") == 1
    assert kinds[-1] == "done" and all(e["time"] >= timeline[0]["time"] for e in timeline)
    # Capacity events fire at their step exactly: the trainer waits there until the driver applied them.
    assert [r["step"] for r in records(run_dir) if r.get("event") == "stop"] == [5, 12, 18, 30]
    report = json.loads((run_dir / "rehearsal_report.json").read_text())
    causes = [t["cause"] for t in report["transitions"]]
    assert causes == ["resize", "resize", "resize", "failure", "resize"]
    assert {t["restart"] for t in report["transitions"]} == {"process"}  # torchrun starts new workers each time
    for t in report["transitions"]:
        assert t["downtime_s"] > 0 and t["relaunch_to_first_step_s"] > 0
        if t["cause"] == "resize":
            assert t["checkpoint_bytes"] > 0 and t["steps_recomputed"] == 0
    assert report["transitions"][3]["resumed_from"] in ("peers step 25", "peers step 26")
    assert report["transitions"][3]["steps_recomputed"] <= 1
    assert 0 < report["utilization"] <= 1 and report["matched"] is True


def test_chart_is_a_valid_png(rehearsal):
    _, run_dir, _, _ = rehearsal
    from PIL import Image

    with Image.open(run_dir / "rehearsal.png") as image:
        image.verify()
        assert image.format == "PNG" and image.size[0] > 500


def test_the_trace_example_in_the_settings_is_accepted():
    import re

    from elastic_launcher.capacity.traces import parse_trace

    settings = (ROOT / "elastic_launcher" / "config" / "settings.py").read_text()
    example = re.search(r"trace: Any = None .*e\.g\. (\[.*\]) or", settings).group(1)
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    value = OverridesParser.create().parse_override(f"local.trace={example}").value()
    events = parse_trace(OmegaConf.to_container(OmegaConf.create({"t": value}))["t"], 3)
    assert [(e.step, e.nodes) for e in events] == [(0, 2), (6, 3)]


def test_a_failed_reference_run_is_reported_by_its_own_failure_not_the_rehearsals(tmp_path):
    """The rehearsal and its reference share one log: the reference's failure is read from where it
    started, the trainer's own error first, else the failed worker's exit as torchrun reports it."""
    from elastic_launcher.local.rehearse import failure_line

    log = tmp_path / "torchrun.log"
    log.write_text("error: reward function x raised on sample 3\n")  # the elastic run's, already handled
    start = log.stat().st_size
    with open(log, "a") as f:
        f.write('{"step": 2, "loss": 0.1}\nRoot Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n'
                "  exitcode  : -11 (pid: 4242)\n  error_file: <N/A>\n  traceback : Signal 11 (SIGSEGV) received by PID 4242\n")
    assert failure_line(log, start) == ("exitcode  : -11 (pid: 4242), error_file: <N/A>, "
                                        "traceback : Signal 11 (SIGSEGV) received by PID 4242")
    with open(log, "a") as f:
        f.write("error: the judge refused the credentials\n")
    assert failure_line(log, start) == "the judge refused the credentials"
    assert failure_line(log, log.stat().st_size) == "it wrote nothing"


def test_the_simulator_predicts_the_rehearsal_from_its_own_measurements(rehearsal, tmp_path):
    """Fed with the rehearsal's measured steps/s per size and resize costs, the simulator (the same
    operator decisions, virtual time) predicts its wall time and the steps committed at each size within 10%."""
    from elastic_launcher.cli import main

    _, run_dir, _, _ = rehearsal
    code = main(["recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true", "action=simulate",
                 f"recipes.training_config.training_args.max_steps={STEPS}", f"simulate.capacity={ROOT / 'traces' / 'demo.yaml'}",
                 f"simulate.throughput={run_dir}", f"simulate.costs={run_dir / 'rehearsal_report.json'}",
                 f"output_dir={tmp_path}"])
    assert code == 0
    report = json.loads((tmp_path / "tiny-llama-sft" / "simulation" / "simulation.json").read_text())
    predicted = next(o for o in report["outcomes"] if o["policy"] == "elastic")
    timeline = json.loads((run_dir / "timeline.json").read_text())
    wall = timeline[-1]["t"] - next(e["t"] for e in timeline if e["event"] == "launch")
    assert predicted["hours"] * 3600 == pytest.approx(wall, rel=0.10)
    committed_at = {r["step"]: r["world_size"] for r in records(run_dir) if "loss" in r}  # a redone step: its last run
    ran = {}
    for size in committed_at.values():
        ran[size] = ran.get(size, 0) + 1
    assert {int(n) for n in predicted["steps_by_nodes"]} == set(ran)
    for nodes, steps in predicted["steps_by_nodes"].items():
        assert steps == pytest.approx(ran[int(nodes)], rel=0.10), (nodes, steps, ran)
    assert predicted["resizes"] == 4 and predicted["failures"] == 1


GRACE = 20  # the recipe's graceful_shutdown_timeout in the interrupt test


@pytest.mark.timeout(240)
@pytest.mark.parametrize("after_line, delay, sig", [
    ("signal signal=SIGUSR1", 0.0, signal.SIGINT),  # inside the resize's stop: the workers are saving
    ("launch nodes=3", 0.0, signal.SIGINT),  # the relaunch's torchrun has no workers yet
    ("launch nodes=3", 1.0, signal.SIGTERM),  # its workers are importing
    ("launch nodes=3", 3.0, signal.SIGINT),  # its workers are starting up at the new size
], ids=["during-stop", "at-relaunch", "workers-importing", "workers-starting"])
def test_an_interrupt_anywhere_in_a_resize_stops_the_whole_rehearsal(tmp_path, after_line, delay, sig):
    """Ctrl-C or SIGTERM to the launcher while the demo trace's first resize (2 -> 3 nodes at step 5)
    stops and relaunches the job: the launcher stops every process within the graceful timeout,
    nothing trains at the new size, and the resize's checkpoint is the newest."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "launcher.py"), "recipes=llama/tiny_llama_sft", "recipes.elastic_policy.is_elastic=true",
         "action=rehearse", f"local.trace={ROOT / 'traces' / 'demo.yaml'}", f"local.run_dir={run_dir}",
         "recipes.training_config.training_args.max_steps=100000", f"recipes.elastic_policy.graceful_shutdown_timeout={GRACE}",
         f"output_dir={tmp_path / 'out'}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=interruptible)
    output = []
    try:
        for line in proc.stdout:
            output.append(line)
            if after_line in line:
                break
        time.sleep(delay)
        proc.send_signal(sig)
        interrupted = time.monotonic()
        output += proc.stdout.readlines()
        assert proc.wait(timeout=GRACE + 30) == 130, "".join(output)
        assert time.monotonic() - interrupted < GRACE, "".join(output)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stopped: the rehearsal" in "".join(output)
    trained = [(r["step"], r["world_size"]) for r in records(run_dir) if "loss" in r]
    assert max(trained) == (5, 2), trained  # nothing after the resize's stop, nothing at 3 nodes
    assert step_of(latest_checkpoint(run_dir / "checkpoints")) == 5
    wait_for(lambda: not own_processes(run_dir), timeout=10)
