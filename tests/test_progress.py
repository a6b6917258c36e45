"""What a local run shows a person: one line per step with its place in the run, the time left and
the method's figures; the run's curves drawn into its directory; a summary where it ends."""

import json

from elastic_launcher.local.progress import CHART, Progress, summary


def grpo_record(step, t, world_size=2, **figures):
    return {"time": t, "launch": "1", "step": step, "loss": 0.001, "reward": 0.1 * step, "reward_std": 0.05,
            "reward_math_verify": 0.0, "reward_digits": 0.1 * step, "kl": 0.01 * step, "completion_tokens_mean": 8.0,
            "step_time": 1.0, "world_size": world_size, "reward_s": 0.1, "rollout_s": 0.5, **figures}


def write_run(run_dir, records):
    run_dir.mkdir(exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_step_reads_as_its_place_in_the_run_the_time_left_and_the_methods_figures(tmp_path):
    progress = Progress(tmp_path)
    write_run(tmp_path, [])
    start = {"time": 100.0, "launch": "1", "event": "start", "process_start": 90.0, "max_steps": 30}
    assert progress.line(start).startswith("event=start ")
    assert progress.line(grpo_record(1, 110.0)) == "step 1/30  0:20  reward 0.100 ±0.050  kl 0.010"
    assert progress.line(grpo_record(3, 114.0)) == "step 3/30  0:24, ~0:54 left  reward 0.300 ±0.050  kl 0.030"
    sft = {"time": 120.0, "launch": "1", "step": 4, "loss": 2.30125, "step_time": 1.0, "world_size": 2}
    assert progress.line(sft).endswith("loss 2.3013")
    assert progress.line({"event": "warning", "step": 5, "message": "no learning signal"}) == \
        "warning (step 5): no learning signal"


def test_the_summary_says_how_long_and_the_figure_at_both_ends_and_draws_the_curves(tmp_path):
    records = [{"time": 0.0, "launch": "1", "event": "start", "process_start": 0.0, "max_steps": 20}]
    records += [grpo_record(s, 3.0 * s, world_size=2 if s <= 10 else 1) for s in range(1, 21)]
    write_run(tmp_path, records)
    (tmp_path / "samples.jsonl").write_text("")
    line = summary(tmp_path)
    assert line == (f"20 steps in 1:00; reward 0.55 over the first 10 steps, 1.55 over the last 10; in {tmp_path}: "
                    f"metrics.jsonl, samples.jsonl, {CHART}")
    assert (tmp_path / CHART).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_chart_shows_the_methods_curves_and_marks_each_resize(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    from training.contract.curves import draw, panels

    assert panels(grpo_record(1, 0.0)) == [("reward", ["reward", "reward_math_verify", "reward_digits"]),
                                           ("KL to the reference", ["kl"]),
                                           ("completion tokens (mean)", ["completion_tokens_mean"]),
                                           ("loss", ["loss"])]
    assert panels({"step": 1, "loss": 2.0, "lr": 1e-4}) == [("loss", ["loss"]), ("learning rate", ["lr"])]
    marks = []
    monkeypatch.setattr(Axes, "axvline", lambda self, x, **kw: marks.append(x))
    sizes = [2] * 5 + [1] * 5 + [2] * 5
    # step 4 redone after a restart: its last record counts
    records = [grpo_record(s, float(s), world_size=sizes[s - 1]) for s in range(1, 16)] + [grpo_record(4, 20.0)]
    assert draw(records, tmp_path / "c.png") == tmp_path / "c.png"
    assert sorted(set(marks)) == [5.5, 10.5] and len(marks) == 2 * 4  # each resize on each of the 4 panels
    assert [p.name for p in tmp_path.iterdir()] == ["c.png"]  # written whole, nothing partial beside it
    assert draw([{"event": "start", "time": 0.0}], tmp_path / "none.png") is None


def test_the_trainer_draws_its_chart_at_the_end_and_at_a_checkpoint_once_it_is_old(tmp_path, monkeypatch, capsys):
    from training.contract.curves import CHART
    from training.runtime.metrics import MetricsLogger

    def logger():
        log = MetricsLogger(tmp_path, enabled=True, tensorboard=False, audit_samples=False, launch_id="1")
        for s in (1, 2):
            log.log(grpo_record(s, float(s)))
        return log

    log = logger()
    log.event(event="checkpoint", step=2)  # the first minutes: no step waits for a drawing
    log.close("KILLED")  # a stop: the restart goes on drawing
    assert not (tmp_path / CHART).exists()
    log = logger()
    log._next_drawing = 0.0  # REDRAW_S has passed
    log.event(event="checkpoint", step=2)
    assert (tmp_path / CHART).exists()
    (tmp_path / CHART).unlink()
    logger().close("FINISHED")
    assert (tmp_path / CHART).exists()
    # No matplotlib in the image: said once, and the run goes on.
    (tmp_path / CHART).unlink()
    monkeypatch.setitem(__import__("sys").modules, "matplotlib.figure", None)
    log = logger()
    log.draw_curves()
    log.close("FINISHED")
    err = capsys.readouterr().err
    assert err.count("warning: curves.png not drawn (ModuleNotFoundError") == 1 and not (tmp_path / CHART).exists()
