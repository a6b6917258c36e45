"""The project as a package: pyproject lists every subpackage, `pip install .` and `pip install -e .`
give a console command whose dry run works from any directory (the recipes, scale configs, templates
and traces travel with an installed copy), and every command the README and docs show composes and
validates as written."""

import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import PurePosixPath

import pytest

from conftest import ROOT, tracked_copy

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


DATA_FOLDERS = ("data", "recipes", "scale_configs", "templates", "traces")  # carried as elastic_launcher.project.*


def data_files() -> list[str]:
    """The project's data files as the checkout tracks them (a fresh clone's, without build leftovers)."""
    listed = subprocess.run(["git", "ls-files", *DATA_FOLDERS, "launcher.yaml"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    return [path for path in listed if not path.endswith(".py")]


def test_pyproject_lists_every_package():
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    code = {".".join(p.parent.relative_to(ROOT).parts) for top in ("elastic_launcher", "training")
            for p in (ROOT / top).rglob("__init__.py")}
    code.add("training.judge_templates")  # the judge's prompt templates: data the trainer reads
    # setuptools wants every folder that holds package data listed as a package, or it warns
    data = {".".join(("elastic_launcher", "project", *PurePosixPath(path).parent.parts))
            for path in data_files() if "/" in path}
    assert packages == code | data | {"elastic_launcher.project"}


def test_the_wheel_builds_quietly_and_carries_every_data_file(tmp_path):
    """A build from the tracked files alone (as CI's clean clone has them) prints no setuptools
    warning, and the wheel holds every recipe, scale config, template, trace and tiny data file."""
    source = tracked_copy(tmp_path / "source")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    warnings = [line.strip() for line in (build.stdout + build.stderr).splitlines()
                if re.search(r"Warning|absent from|would be ignored", line)]
    assert not warnings, warnings[:5]
    wheel = zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl")))
    missing = {path for path in data_files()} - {name.removeprefix("elastic_launcher/project/")
                                                 for name in wheel.namelist()}
    assert not missing
    templates = {f"training/judge_templates/{p.name}" for p in (ROOT / "training" / "judge_templates").glob("*.jinja")}
    assert templates and templates <= set(wheel.namelist())  # the LLM judge's shipped prompts


def fresh_venv(path):
    """A virtualenv seeing the packages of the environment running the tests, whatever it is (a
    user's venv, CI's interpreter): its pip, its setuptools and the project's dependencies, with no
    download. `--system-site-packages` would show the base interpreter's instead, and a venv's own
    bundled setuptools would shadow the environment's."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    site_packages = next((path / "lib").glob("python*/site-packages"))
    outer = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (site_packages / "outer_environment.pth").write_text("\n".join(outer) + "\n")
    return path / "bin"


@pytest.mark.slow
@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_the_installed_console_command_plans_from_any_directory(tmp_path, editable):
    bin_dir = fresh_venv(tmp_path / "venv")
    install = [bin_dir / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
               "--check-build-dependencies", *(["-e", str(ROOT)] if editable else [str(tracked_copy(tmp_path / "source"))])]
    subprocess.run(install, check=True, timeout=300, cwd=tmp_path, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([bin_dir / "elastic-launcher", "recipes=llama/tiny_llama_sft", f"output_dir={tmp_path / 'out'}"],
                         cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "out" / "tiny-llama-sft" / "configs" / "config-n2.yaml").exists()
    agent = subprocess.run([bin_dir / "elastic-launcher", "recipes=llama/tiny_llama_agent", f"output_dir={tmp_path / 'out'}"],
                           cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert agent.returncode == 0, agent.stderr[-2000:]  # its environment file found in the project, as its data is
    root = subprocess.run([bin_dir / "python", "-c", "import elastic_launcher; print(elastic_launcher.ROOT)"],
                          cwd=elsewhere, capture_output=True, text=True, timeout=60).stdout.strip()
    assert (root == str(ROOT)) == editable  # an installed copy carries its own recipes
    if not editable:  # the copy trains too: tiny data, tokenizer and the trainer all came with it
        out = subprocess.run([bin_dir / "elastic-launcher", "recipes=llama/tiny_llama_sft", "action=local",
                              "recipes.training_config.training_args.max_steps=2", f"local.run_dir={tmp_path / 'run'}"],
                             cwd=elsewhere, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert (tmp_path / "run" / "metrics.jsonl").exists()


def launcher_commands() -> list[tuple[str, list[str]]]:
    """Every `python launcher.py ...` command in README.md and docs/, with `$C` expanded."""
    found = []
    for page in DOCS:
        variables = {}  # a shell variable set in one block holds in the page's later blocks
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S):
            text = block.replace("\\\n", " ")
            variables.update(re.findall(r'^(\w+)="([^"]*)"', text, re.M))
            for line in text.splitlines():
                line = line.split("#")[0].strip()
                if line.startswith("python launcher.py"):
                    line = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], line)
                    args = shlex.split(line)[2:]
                    if "recipes=byo/my_mistral_lora" in args:  # the recipe the page's new_recipe step writes:
                        continue  # that flow runs in tests/test_user_recipes.py, from a saved model
                    found.append((page.name, args))
    return found


def test_the_readmes_dry_run_output_is_what_its_main_command_prints(launch):
    """The README shows the main command's output as it is today (the memory column included)."""
    readme = (ROOT / "README.md").read_text()
    shown = re.search(r"```\n(llama3-1-8b-sft:.*?)```", readme, re.S).group(1)
    main = re.search(r"```bash\npip install -r requirements.txt\npython launcher.py (.*?)\n```", readme).group(1)
    code, out, _ = launch(*shlex.split(main))
    assert code == 0
    assert shown.splitlines() == [line for line in out.splitlines() if not line.startswith("wrote ")]


def test_the_docs_show_launcher_commands():
    pages = {page for page, _ in launcher_commands()}
    assert {"README.md", "cluster.md", "overrides.md", "rehearsal-and-simulation.md"} <= pages


@pytest.mark.parametrize("page, args", launcher_commands(),
                         ids=[f"{page}:{i}" for i, (page, _) in enumerate(launcher_commands())])
def test_every_documented_launcher_command_composes_and_validates(page, args, launch, tmp_path, monkeypatch):
    """Each command as pasted (placeholders like <image> filled), its action swapped for a dry run, from
    a directory other than the checkout (the files it names found as from the checkout): every key,
    value, recipe and file it names must exist and pass validation at every size."""
    filled = [re.sub(r"<[^>]+>", "placeholder", a) for a in args if not a.startswith("action=")]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, out, err = launch(*filled, "action=dry_run")
    assert code == 0, (page, args, err[-1500:])
