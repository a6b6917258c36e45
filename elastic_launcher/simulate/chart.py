"""The simulation's chart (simulation.png): the elastic job's size against the free capacity, and
every policy's tokens over time, in hours."""

from __future__ import annotations

import math
from pathlib import Path

from elastic_launcher.simulate.outcome import Outcome


def chart_data(outcomes: list[Outcome], title: str, tokens_per_step: int, daily: bool) -> dict:
    """What the chart draws, in hours: the x range ends shortly after the elastic job does (a
    baseline that runs longer is cut and says so in its label), capacity, every policy's size and
    tokens, and for the elastic job its resizes, failures, the spans it spent starting or stopping,
    and the free nodes it left idle. The elastic series comes last."""
    elastic, baselines = outcomes[0], outcomes[1:]
    x_end = max(elastic.hours * 1.08, 1 / 60)
    points = elastic.timeline

    def steps_of(o: Outcome) -> list[tuple[float, float]]:
        return [(p.t / 3600, min(p.steps * tokens_per_step / 1e9, o.steps * tokens_per_step / 1e9)) for p in o.timeline]

    def series(o: Outcome) -> dict:
        cut = o.hours > x_end
        label = f"{o.policy}: " + (f"done at {o.hours:.1f} h" if o.finished and not cut else
                                   f"{'done at ' + format(o.hours, '.1f') + ' h' if o.finished else 'not done'}, "
                                   f"beyond the chart" if cut else "not done")
        return {"policy": o.policy, "label": label, "size": [(p.t / 3600, p.held) for p in o.timeline],
                "tokens": steps_of(o)}

    spans = [(a.t / 3600, b.t / 3600, a.phase) for a, b in zip(points, points[1:])
             if a.phase in ("starting", "stopping", "failing")]
    resizes, ran_at = [], 0  # (hour, from, to) where the job runs again at another size
    for p in points:
        if p.phase == "running" and p.held != ran_at:
            if ran_at:
                resizes.append((p.t / 3600, ran_at, p.held))
            ran_at = p.held
    failures = [b.t / 3600 for a, b in zip(points, points[1:]) if b.phase == "failing" and a.phase != "failing"]
    idle = [(a.t / 3600, b.t / 3600, a.held, a.capacity) for a, b in zip(points, points[1:]) if a.capacity > a.held]
    return {"title": title, "x_end_h": x_end, "daily": daily,
            "capacity": [(p.t / 3600, p.capacity) for p in points],
            "series": [series(o) for o in baselines] + [series(elastic)],
            "resizes": resizes, "failures": failures, "busy_spans": spans, "idle": idle}


def chart(path: Path, data: dict, gpus: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, (ax_size, ax_tokens) = plt.subplots(2, 1, sharex=True, figsize=(11, 6.5), height_ratios=(3, 2))
    cap_t, cap_n = zip(*data["capacity"])
    ax_size.fill_between(cap_t, cap_n, step="post", color="0.85", label="free capacity")
    if data["idle"]:  # one call for every idle interval (NaN separates them): long traces have thousands
        xs, low, high = [], [], []
        for t0, t1, held, free in data["idle"]:
            xs += [t0, t1, t1]
            low += [held, held, math.nan]
            high += [free, free, math.nan]
        ax_size.fill_between(xs, low, high, color="tab:red", alpha=0.12, lw=0, label="idle (free, not held)")
    top = max(n for _, n in data["capacity"]) + 1
    for phase, color in (("starting", "gold"), ("stopping", "tab:purple"), ("failing", "tab:red")):
        spans = [(t0, t1 - t0) for t0, t1, kind in data["busy_spans"] if kind == phase]
        if spans:
            ax_size.broken_barh(spans, (0, top), color=color, alpha=0.25, lw=0, label=f"elastic job {phase}")
    colors = ["tab:orange", "tab:green", "0.4", "tab:cyan"]
    for i, serie in enumerate(data["series"]):
        # the elastic job wide and underneath, the static ones thin and dashed over it: where a static job
        # runs exactly as the elastic one (at max size on a full cluster), both stay visible
        elastic = i == len(data["series"]) - 1
        color, width, z, style = ("tab:blue", 3.0, 3, "-") if elastic else (colors[i % len(colors)], 1.3, 5, "--")
        t, n = zip(*serie["size"])
        ax_size.step(t, n, where="post", color=color, lw=width, ls=style, zorder=z, label=f"{serie['policy']} size")
        t, tokens = zip(*serie["tokens"])
        ax_tokens.plot(t, tokens, color=color, lw=width, ls=style, zorder=z, label=serie["label"])
    if data["resizes"]:
        ax_size.scatter([t for t, *_ in data["resizes"]], [n for *_, n in data["resizes"]], marker="D", s=25,
                        color="tab:blue", zorder=6, label="resize")
    for i, t in enumerate(data["failures"]):
        ax_size.axvline(t, color="tab:red", ls="--", lw=1, label="node failure" if i == 0 else None)
    ax_size.set_xlim(0, data["x_end_h"])
    if data["daily"]:  # clock time: hours since midnight of day 1
        ax_tokens.xaxis.set_major_formatter(FuncFormatter(
            lambda h, _: f"{'day ' + str(int(h // 24) + 1) + ' ' if h >= 24 else ''}{int(h % 24):02d}:{int(h * 60 % 60):02d}"))
        ax_tokens.set_xlabel("clock time")
    else:
        ax_tokens.set_xlabel("hours")
    ax_size.set_ylabel(f"nodes ({gpus} GPUs each)")
    ax_tokens.set_ylabel("tokens trained (billions)")
    ax_size.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax_tokens.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax_size.set_title(data["title"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
