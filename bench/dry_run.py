"""Cold dry-run wall time of every shipped recipe (elastic), as whole processes, against the floor of
starting Python and importing hydra + omegaconf + jinja2 (measured in the same run).

    python bench/dry_run.py [--runs 7]
"""

import argparse
import sys
import tempfile

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))

from bench.common import python, time_process  # noqa: E402
from elastic_launcher.config.compose import options  # noqa: E402

GOAL_SECONDS = 0.5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    floor = time_process(python("-c", "import hydra, omegaconf, jinja2"), runs)
    print(f"floor: python -c 'import hydra, omegaconf, jinja2': {floor:.3f} s (median of {runs})")
    print(f"{'recipe':32} {'dry run (s)':>11} {'x floor':>8}  goal <= {GOAL_SECONDS} s")
    worst = 0.0
    with tempfile.TemporaryDirectory() as out:
        for recipe in options("recipes"):
            t = time_process(python("launcher.py", f"recipes={recipe}", "recipes.elastic_policy.is_elastic=true",
                                    f"output_dir={out}"), runs)
            worst = max(worst, t)
            print(f"{recipe:32} {t:11.3f} {t / floor:8.2f}")
    print(f"slowest: {worst:.3f} s -> {'meets' if worst <= GOAL_SECONDS else 'misses'} the {GOAL_SECONDS} s goal; "
          f"launcher work above the import floor: {worst - floor:.3f} s")


if __name__ == "__main__":
    main()
