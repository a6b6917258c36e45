"""Write a recipe for your own model into your recipe directory ($LAUNCHER_RECIPES), trace its
memory there, and show its dry run:

    export LAUNCHER_RECIPES=~/launcher-recipes
    python scripts/new_recipe.py /models/my-mistral --method sft_lora --name byo/my_mistral_lora
    python launcher.py recipes=byo/my_mistral_lora recipes.training_config.datasets.train_data=/data/chats.jsonl

MODEL is a directory written by transformers' save_pretrained (its config.json is read) or a hub id
(where the hub is reachable). The recipe gets the model's shape, the method's defaults, the instance
types its model fits and an elastic policy from the smallest node count that fits to four times it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elastic_launcher.cli import main as launcher  # noqa: E402
from elastic_launcher.errors import USER_ERRORS, report  # noqa: E402
from elastic_launcher.new_recipe import METHODS, write_recipe  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a save_pretrained directory or a hub id")
    parser.add_argument("--method", choices=list(METHODS), default="sft")
    parser.add_argument("--name", required=True, help="<family>/<name>, as recipes=<name> will take it")
    parser.add_argument("--max-len", type=int, default=4096, help="sequence length (datasets.max_len)")
    parser.add_argument("--max-steps-off-policy", type=int, default=0,
                        help="GRPO: draw each step's batch this many steps behind the policy (method_args.max_steps_off_policy)")
    parser.add_argument("--rollout-ranks-per-node", type=int, default=0,
                        help="GRPO: this many of each node's GPUs only generate, the others train "
                             "(method_args.rollout_ranks_per_node)")
    parser.add_argument("--no-trace", action="store_true", help="skip tracing the memory of each allowed size")
    parser.add_argument("--output-dir", default="results", help="where the dry run writes the manifests")
    args = parser.parse_args(argv)
    try:
        made = write_recipe(args.model, args.method, args.name, args.max_len, args.max_steps_off_policy,
                            args.rollout_ranks_per_node)
    except USER_ERRORS as e:
        return report(e)
    print(f"wrote {made.path}: {made.instance_type}, {made.min_nodes}..{made.max_nodes} nodes, micro-batch "
          f"{made.micro_batch}", flush=True)
    if not args.no_trace:
        traced = subprocess.run([sys.executable, str(Path(__file__).with_name("trace_memory.py")), args.name, "--keep",
                                 "--stale"])
        if traced.returncode:
            return traced.returncode
    return launcher([f"recipes={args.name}", f"output_dir={args.output_dir}"])


if __name__ == "__main__":
    sys.exit(main())
