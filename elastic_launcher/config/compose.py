"""Command line -> resolved config, through Hydra's Compose API.

One composition instead of the two that `@hydra.main` performs keeps a dry run fast; the override
grammar (`key=value`, `group=option`, `+key`, `++key`, `~key`) is Hydra's own. Hydra's multi-line
errors become one line that names the key and suggests the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import re

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from elastic_launcher import ROOT
from elastic_launcher.config.settings import LauncherSettings
from elastic_launcher.config.user_recipes import evaluation_recipes, options, user_dirs
from elastic_launcher.config.policy import ElasticPolicy, Hardware
from training.contract.config import JobConfig
from training.contract.errors import ConfigError

PRIMARY = "launcher"
SETTINGS_NAME = "launcher_settings"  # the launcher's own settings, first in launcher.yaml's defaults
SCHEMA_GROUP, SCHEMA_NAME = "recipes/common", "schema"  # selected by recipes/common/sft.yaml
# The launcher uses none of Hydra's runtime (logging, output dirs, sweeps, launchers); not loading
# those config groups saves a third of the composition time.
_SKIP_HYDRA_RUNTIME = ["hydra/job_logging=none", "hydra/hydra_logging=none", "~hydra/help", "~hydra/hydra_help",
                       "~hydra/output", "~hydra/launcher", "~hydra/sweeper", "~hydra/env"]


def schema_defaults() -> dict:
    """Every recipe key with its default, from the dataclasses that define them (the trainer's
    JobConfig, the launcher's ElasticPolicy and Hardware): recipes/common/sft.yaml starts from this
    node and states only what differs, so every key exists (and is overridable) with one definition."""
    return {**dataclasses.asdict(JobConfig()), "elastic_policy": dataclasses.asdict(ElasticPolicy()),
            **dataclasses.asdict(Hardware())}


def compose(overrides: list[str]) -> tuple[DictConfig, str]:
    """The composed config (without Hydra's own section) and the name of the chosen recipe."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.errors import HydraException

    ConfigStore.instance().store(group=SCHEMA_GROUP, name=SCHEMA_NAME, node=schema_defaults())
    ConfigStore.instance().store(name=SETTINGS_NAME, node=dataclasses.asdict(LauncherSettings()))
    searchpath = [] if any(o.startswith("hydra.searchpath=") for o in overrides) or not user_dirs() else \
        [f"hydra.searchpath=[{','.join(f'file://{d}' for d in user_dirs())}]"]  # $LAUNCHER_RECIPES: the user's recipes
    try:
        with initialize_config_dir(config_dir=str(ROOT), version_base=None, job_name="launcher"):
            cfg = hydra_compose(PRIMARY, overrides=_SKIP_HYDRA_RUNTIME + searchpath + overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_explain(e, overrides)) from None
    recipe = cfg.hydra.runtime.choices.recipes
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, recipe


def _explain(error: Exception, overrides: list[str]) -> str:
    text = str(error)
    missing = re.search(r"Could not find '([^'/]+)/([^']+)'", text)  # e.g. 'recipes/llama/llama3_1_8b_stf'
    if missing:
        group, option = missing.groups()
        key = "scale_configs@recipes.scale_config" if group == "scale_configs" else group
        choices = options(group) + (evaluation_recipes() if group == "recipes" else [])
        close = difflib.get_close_matches(option, choices, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(close)}?" if close else f"available: {', '.join(choices)}"
        return f"unknown {group} option {key}={option}: {hint}"
    not_found = re.search(r"Could not (?:override|delete) '([^']+)'", text)
    if not_found:
        return _explain_key(not_found.group(1), overrides)
    first = text.strip().splitlines()[0]
    bad = getattr(error, "override", None)
    placeholder = re.fullmatch(r"([\w.@+~]+)=<([^<>]*)>", bad or "")
    if placeholder:  # a value the docs leave for the user to fill in, pasted as written
        key, what = placeholder.groups()
        return f"{key}=<{what}> is the docs' placeholder: put your own {what} there ({key}=...)"
    if bad is not None:
        first = f"cannot parse override '{bad}': {first} (quote values with special characters)"
    return first + " (see https://hydra.cc/docs/advanced/override_grammar/basic/)"


UNDER_RECIPES = "(a recipe's keys, as the docs and errors name them, sit under recipes. on the command line)"


def _explain_key(key: str, overrides: list[str]) -> str:
    """Find the first segment of `key` the config lacks and suggest the closest existing one."""
    # The config as composed from the group choices alone (minus the failing key), to look `key` up in.
    groups_only = [o for o in overrides if "=" in o and "." not in o.split("=", 1)[0].lstrip("+~")
                   and o.split("=", 1)[0].lstrip("+~") != key]
    try:
        node = compose(groups_only)[0]
    except ConfigError:
        node = None
    parts = key.split(".")
    for i, part in enumerate(parts):
        if node is None or not isinstance(node, DictConfig):
            break
        if part not in node:
            where = ".".join(parts[: i + 1])
            if part.isdigit() and parts[i - 1 : i] == ["scale_config"]:
                return (f"cannot override '{key}': scale_config entries are keyed n<nodes> on the command line, "
                        f"e.g. {'.'.join(parts[:i])}.n{part}{'.' if i + 1 < len(parts) else ''}"
                        f"{'.'.join(parts[i + 1:])}=... (prefix + to add to an integer-keyed upstream entry)")
            if parts[i - 1:i] == ["method_args"] and part in _method_keys():
                return (f"'{where}' is a method key the recipe leaves at its default: set it with +{key}=... "
                        f"(the + adds a key the recipe does not name)")
            if i == 0 and isinstance(node.get("recipes"), DictConfig) and part in node.recipes:
                return f"unknown key '{where}' in override of '{key}': did you mean 'recipes.{key}'? {UNDER_RECIPES}"
            close = difflib.get_close_matches(part, [str(k) for k in node.keys()], n=1, cutoff=0.6)
            hint = f"did you mean '{'.'.join(parts[:i] + [close[0]])}'?" if close else \
                f"to add a new key use +{key}=..."
            return f"unknown key '{where}' in override of '{key}': {hint}"
        node = node[part]
    return f"cannot override '{key}': to add a new key use +{key}=..."


def to_plain(cfg: DictConfig) -> dict:
    """Resolve every interpolation; a missing mandatory value (???) is a one-line error."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ConfigError(f"{key} has no value ({type(e).__name__}: {str(e).splitlines()[0]}): "
                          f"set it on the command line, e.g. {key}=...") from None


def _method_keys() -> set[str]:
    """Every training method's own keys (training_args.method_args)."""
    from training.contract.methods import method_facts, method_names

    return {f.name for name in method_names() for f in dataclasses.fields(method_facts(name).args)}
