"""Your own recipes ($LAUNCHER_RECIPES): composed, listed and suggested as the catalogue is, and their
memory traces kept in your directory, never in the package."""

import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, run_launcher_process
from elastic_launcher.config.user_recipes import PACKAGE_TRACES

SHORT_1B = """\
# Llama 3.2 1B SFT on short rows.
defaults:
  - /recipes/llama/llama3_2_1b_sft@_here_
  - _self_
run:
  name: llama1b-short-sft
training_config:
  datasets:
    max_len: 1024
elastic_policy:
  min_nodes: 1
  max_nodes: 2
"""


@pytest.fixture
def mine(tmp_path):
    home = tmp_path / "mine"
    (home / "recipes" / "byo").mkdir(parents=True)
    (home / "recipes" / "byo" / "llama1b_short_sft.yaml").write_text(SHORT_1B)
    return home


def test_your_recipes_are_listed_suggested_and_dry_run(mine, tmp_path):
    env = {"LAUNCHER_RECIPES": str(mine)}
    help_text = run_launcher_process("--help", env=env).stdout
    assert help_text.rstrip().endswith(textwrap.dedent(f"""\
        your recipes (LAUNCHER_RECIPES={mine}):
          byo/
            byo/llama1b_short_sft"""))
    typo = run_launcher_process("recipes=byo/llama1b_shrt_sft", env=env)
    assert typo.returncode == 2
    assert typo.stderr.startswith("error: unknown recipes option recipes=byo/llama1b_shrt_sft: did you mean "
                                  "byo/llama1b_short_sft or ")
    done = run_launcher_process("recipes=byo/llama1b_short_sft", "recipes.elastic_policy.is_elastic=true",
                                f"output_dir={tmp_path / 'out'}", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("llama1b-short-sft: elastic, 1..2 nodes")
    missing = run_launcher_process("--help", env={"LAUNCHER_RECIPES": str(tmp_path / "nope")})
    assert missing.returncode == 2 and missing.stderr == (f"error: LAUNCHER_RECIPES={tmp_path / 'nope'}: no such "
                                                          f"directory: point it at a directory holding "
                                                          f"recipes/<family>/<name>.yaml, or unset it\n")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_your_recipes_traces_go_to_your_directory_and_the_dry_run_reads_them(mine, tmp_path):
    env = {"LAUNCHER_RECIPES": str(mine)}
    package_before = PACKAGE_TRACES.read_bytes()
    dry = ["recipes=byo/llama1b_short_sft", "recipes.elastic_policy.is_elastic=true", f"output_dir={tmp_path / 'out'}"]

    def gib_column() -> list[str]:
        out = run_launcher_process(*dry, env=env).stdout.splitlines()
        return [line.split()[-2] for line in out if line.strip()[:1].isdigit()]

    assert all(cell.startswith("~") for cell in gib_column())  # the analytic estimate: never traced
    traced = subprocess.run([sys.executable, str(ROOT / "scripts" / "trace_memory.py"), "byo/llama1b_short_sft",
                             "--keep"], cwd=ROOT, capture_output=True, text=True, timeout=280,
                            env={**__import__("os").environ, **env, "OMP_NUM_THREADS": "1"})
    assert traced.returncode == 0, traced.stderr[-2000:]
    assert PACKAGE_TRACES.read_bytes() == package_before
    assert '"recipe": "byo/llama1b_short_sft"' in (mine / "traced_memory.json").read_text()
    assert not any(cell.startswith("~") for cell in gib_column())
