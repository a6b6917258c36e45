"""Trace the trainer's step on fake tensors for recipes at every allowed size, print the peak GiB
per GPU by category, and keep the figures the dry run shows (elastic_launcher/planning/traced_memory.json
for the catalogue; traced_memory.json in your own recipes' directory, $LAUNCHER_RECIPES, for yours):

    python scripts/trace_memory.py llama/llama3_1_8b_sft          # one recipe, printed
    python scripts/trace_memory.py qwen/qwen3_8b_sft recipes.training_config.training_args.micro_train_batch_size=4 --keep
    python scripts/trace_memory.py --keep --jobs 2                # the catalogue and your recipes, kept
    python scripts/trace_memory.py --stale --keep                 # only what a recipe change made stale
    python scripts/trace_memory.py --table llama/llama3_1_8b_sft  # the kept figures as docs/recipes.md's table
    python scripts/trace_memory.py --prune                        # drop kept traces no catalogue size uses

Sizes are those of the recipe's elastic policy (is_elastic=true), at each instance type it lists. A size is traced over two
micro-batches when it accumulates gradients (the second starts with the first one's held). Traces
are kept by their inputs, so recipes of the same shape and settings share one (e.g. Llama 3.3 70B
and R1-Distill-Llama-70B).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elastic_launcher.config.compose import compose, options, to_plain  # noqa: E402
from elastic_launcher.config.user_recipes import read_traces, trace_files, traces_file  # noqa: E402
from elastic_launcher.planning.memory import trace_inputs, trace_key, with_allowance  # noqa: E402
from elastic_launcher.planning.plan import make_plan  # noqa: E402


def plan_of(recipe: str, overrides: tuple[str, ...] = ()):
    return make_plan(to_plain(compose([f"recipes={recipe}", "recipes.elastic_policy.is_elastic=true",
                                       *overrides])[0])["recipes"])


def size_below(recipe: str, overrides: tuple[str, ...] = ()):
    """(overrides, size) of the largest scale-config size below a full-parameter recipe's min_nodes,
    or None: the size that must not fit if the recipe starts where the model first fits."""
    plan = plan_of(recipe, overrides)
    mc = plan.base.training_config.model_config
    if plan.base.training_config.training_args.trainer_type != "sft" or mc.lora or plan.policy.min_nodes == 1:
        return None
    below = (*overrides, "recipes.elastic_policy.min_nodes=1", "recipes.elastic_policy.replica_discrete_values=null")
    smaller = [s for s in plan_of(recipe, below).sizes if s.nodes < plan.policy.min_nodes]
    return (below, smaller[-1]) if smaller else None


def sizes_to_trace(recipe: str, overrides: tuple[str, ...] = ()) -> list[tuple[str, tuple, int, dict]]:
    """(recipe, overrides, nodes, trace inputs) for every allowed size of a recipe with a model shape
    and, for full-parameter SFT, the size just below its first."""
    plan = plan_of(recipe, overrides)
    if not plan.hardware.model_shape or not plan.instance.gpus:
        return []
    sizes = [(overrides, s) for s in plan.sizes]
    if below := size_below(recipe, overrides):
        sizes.insert(0, below)
    return [(recipe, o, s.nodes, inputs_of(plan, s)) for o, s in sizes]


def every_instance_type(recipe: str, overrides: tuple[str, ...] = ()) -> list[tuple[str, tuple, int, dict]]:
    """sizes_to_trace at each instance type the recipe lists with its GPUs per node (the dry run plans
    those with the recipe's scale configs, and another type's memory may give other micro-batches, so
    other traces), the recipe's own first."""
    from elastic_launcher.planning.instances import lookup

    plan = plan_of(recipe, overrides)
    others = [t for t in plan.hardware.instance_types or [] if t != plan.instance.name
              and lookup(t).gpus == plan.instance.gpus]
    return [job for o in (overrides, *((*overrides, f"recipes.instance_type={t}") for t in others))
            for job in sizes_to_trace(recipe, o)]


def inputs_of(plan, size) -> dict:
    return trace_inputs(plan.hardware.model_shape, size.config.training_config, size.shard_degree,
                        size.batch.micro_batch, size.batch.grad_accum_steps)


def trace_one(job: tuple[str, tuple, int, dict]) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    from training.memory_trace import trace_step

    recipe, overrides, nodes, inputs = job
    try:
        size = next(s for s in plan_of(recipe, overrides).sizes if s.nodes == nodes)
        step = trace_step(size.config, inputs["world_size"], inputs["micro_batch"], inputs["micro_steps"],
                          inputs["model_shape"])
    except Exception as e:  # one size that cannot be traced stops no other
        return {"recipe": recipe, "nodes": nodes, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    return {"recipe": recipe, "nodes": nodes, "world_size": inputs["world_size"], "peak_gib": step.peak_gib,
            "split_gib": step.split_gib, "phase": step.phase, "seconds": step.seconds, "inputs": inputs}


def show(trace: dict, gpu_gib: float) -> str:
    with_it = with_allowance(trace["peak_gib"])
    split = ", ".join(f"{k} {v:.1f}" for k, v in trace["split_gib"].items() if v >= 0.05)
    return (f"{trace['recipe']:<40} {trace['nodes']:>3} nodes  {trace['peak_gib']:6.1f} GiB traced "
            f"({with_it:5.1f} with allowance, {with_it / gpu_gib:4.0%} of {gpu_gib:g})  peak in {trace['phase']}: "
            f"{split}  [{trace['seconds']:.0f} s]")


def table(recipes: list[str], overrides: tuple[str, ...]) -> str:
    """Traced peak, the dry run's GiB/GPU (the trace with the allowance) and the analytic fallback's,
    for the first and last allowed size of each recipe."""
    from elastic_launcher.planning.memory import Allowance, kept_traces
    from elastic_launcher.planning.plan import fallback_estimate

    rows = ["| recipe | nodes | sharding | traced GiB | dry run GiB/GPU | fallback estimate | peak in |",
            "|---|---|---|---|---|---|---|"]
    for recipe in recipes:
        plan = plan_of(recipe, overrides)
        for size in (plan.sizes[0], plan.sizes[-1]):
            inputs = inputs_of(plan, size)
            hsdp = size.shard_degree < size.devices
            allowance = Allowance.of(plan.hardware.model_shape, size.config.training_config, hsdp, size.batch.micro_batch)
            fallback = fallback_estimate(plan.hardware.model_shape, size.config, size.shard_degree, size.batch.micro_batch,
                                         allowance)
            trace = kept_traces()[trace_key(inputs)]
            rows.append(f"| `{recipe}` | {size.nodes} | {'hsdp' if hsdp else 'fsdp'} over {size.shard_degree} | "
                        f"{trace['peak_gib']:.1f} | {size.memory.total_gib:.1f} / {plan.instance.gpu_memory_gib:g} | "
                        f"{fallback.total_gib:.1f} | {trace['phase']} |")
    return "\n".join(rows)


def write(path: Path, traces: dict) -> None:
    ordered = dict(sorted(traces.items(), key=lambda kv: (kv[1]["recipe"], kv[1]["nodes"])))
    path.write_text(json.dumps({"traces": ordered}, indent=1) + "\n")


def keep(trace: dict) -> None:
    """Into its recipe's trace file (the package's for the catalogue, the user's directory's for theirs)."""
    path = traces_file(trace["recipe"])
    write(path, {**read_traces(path), trace_key(trace["inputs"]): trace})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipes", nargs="*", help="recipe names (none: the catalogue), e.g. llama/llama3_1_8b_sft, and "
                        "overrides as the launcher takes them (recipes.<key>=<value>), applied to each")
    parser.add_argument("--stale", action="store_true", help="only sizes whose inputs have no kept trace")
    parser.add_argument("--keep", action="store_true", help="write the traces to the recipe's traced_memory.json")
    parser.add_argument("--jobs", type=int, default=1, help="traces run in parallel (one core each)")
    parser.add_argument("--prune", action="store_true", help="drop the kept traces no recipe size uses (no tracing)")
    parser.add_argument("--table", action="store_true", help="print the kept figures of the recipes' sizes "
                        "as a Markdown table (no tracing)")
    args = parser.parse_args(argv)
    overrides = tuple(a for a in args.recipes if "=" in a)
    named = [a for a in args.recipes if "=" not in a]
    recipes = named or [r for r in options("recipes") if "tiny" not in r]
    if args.table:
        print(table(named, overrides))
        return 0
    kept = {key: trace for path in trace_files() for key, trace in read_traces(path).items()}
    if args.prune:
        used = {trace_key(job[3]) for r in recipes for job in every_instance_type(r, overrides)}
        for path in trace_files():
            traces = read_traces(path)
            if traces:
                write(path, kept_only := {k: v for k, v in traces.items() if k in used})
                print(f"{path}: kept {len(kept_only)} traces, dropped {len(traces) - len(kept_only)}")
        return 0
    jobs = list({trace_key(job[3]): job for r in recipes for job in every_instance_type(r, overrides)}.items())
    if args.stale:
        jobs = [(key, job) for key, job in jobs if key not in kept]
    # Full-parameter SFT first: its first size must fit (the 90% rule), and its traces take longest.
    jobs = [job for _, job in sorted(jobs, key=lambda kj: not kj[1][0].endswith("_sft"))]
    started, failed = time.perf_counter(), 0
    gpu = {r: plan_of(r, overrides).instance.gpu_memory_gib for r in {job[0] for job in jobs}}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for trace in pool.map(trace_one, jobs):
            if "error" in trace:
                failed += 1
                print(f"{trace['recipe']} at {trace['nodes']} nodes: not traced: {trace['error']}", flush=True)
                continue
            print(show(trace, gpu[trace["recipe"]]), flush=True)
            if args.keep:  # after every trace: an interrupted run keeps what it finished
                keep(trace)
    print(f"{len(jobs) - failed} sizes traced in {time.perf_counter() - started:.0f} s with {args.jobs} job(s)"
          + (f"; {failed} failed" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
