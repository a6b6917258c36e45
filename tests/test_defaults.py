"""Defaults written twice must agree: launcher.yaml (what a user reads and overrides) against the
launcher's settings dataclasses, and the shared recipe's elastic_policy against ElasticPolicy. A
drift here means a default depends on which file wins."""

import dataclasses

import yaml

from conftest import ROOT


def flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(written: dict, defaults: dict) -> list:
    return [(key, written.get(key, "<missing>"), defaults.get(key, "<missing>"))
            for key in sorted(set(written) | set(defaults)) if written.get(key, "<missing>") != defaults.get(key, "<missing>")]


def test_launcher_yaml_states_the_settings_defaults():
    from elastic_launcher.settings import LauncherSettings

    written = yaml.safe_load((ROOT / "launcher.yaml").read_text())
    written.pop("defaults")
    assert not differences(flat(written), flat(dataclasses.asdict(LauncherSettings())))


def test_the_shared_recipes_elastic_policy_states_the_policy_defaults():
    from elastic_launcher.plan import ElasticPolicy

    written = yaml.safe_load((ROOT / "recipes" / "common" / "sft.yaml").read_text())["elastic_policy"]
    assert not differences(written, dataclasses.asdict(ElasticPolicy()))
