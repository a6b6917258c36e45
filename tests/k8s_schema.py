"""Independent checks of rendered manifests: JSON schemas of the two CRDs (tests/schemas/), the pod
template against the Kubernetes API models of the official `kubernetes` client, and the HyperPod
SDK's own pydantic mirror of the HyperPodPyTorchJob CRD."""

import importlib.util
import re
from pathlib import Path

import jsonschema
import yaml

SCHEMAS = Path(__file__).parent / "schemas"


def validate_crd(obj: dict, schema_name: str) -> None:
    schema = yaml.safe_load((SCHEMAS / schema_name).read_text())
    jsonschema.validate(obj, schema)


def check_k8s(data, type_name: str, path: str = "$") -> None:
    """Every key must be a field of the Kubernetes model, every value of its type, every required
    field present."""
    from kubernetes import client

    list_of = re.fullmatch(r"(?:list|List)\[(.+)\]", type_name)
    dict_of = re.fullmatch(r"(?:dict\(|Dict\[)str, (.+)[\)\]]", type_name)
    if list_of:
        assert isinstance(data, list), f"{path}: expected a list"
        for i, item in enumerate(data):
            check_k8s(item, list_of.group(1), f"{path}[{i}]")
    elif dict_of:
        assert isinstance(data, dict), f"{path}: expected a mapping"
        value_type = dict_of.group(1)
        for key, value in data.items():
            check_k8s(value, value_type, f"{path}.{key}")
    elif type_name in ("str", "int", "bool", "float"):
        expected = {"str": str, "int": int, "bool": bool, "float": (int, float)}[type_name]
        assert isinstance(data, expected), f"{path}: {data!r} is not {type_name}"
    elif type_name != "object":
        model = getattr(client, type_name)
        assert isinstance(data, dict), f"{path}: expected a {type_name} mapping"
        by_json = {v: k for k, v in model.attribute_map.items()}
        unknown = set(data) - set(by_json)
        assert not unknown, f"{path}: {sorted(unknown)} are not fields of {type_name}"
        for key, value in data.items():
            check_k8s(value, model.openapi_types[by_json[key]], f"{path}.{key}")
        model(**{by_json[k]: v for k, v in data.items()})  # raises on a missing required field


def hyperpod_sdk_model():
    """The SDK's pydantic model of the HyperPodPyTorchJob spec (a fixture copied from its wheel)."""
    spec = importlib.util.spec_from_file_location("hyperpod_unified_config",
                                                  SCHEMAS / "hyperpod_pytorch_job_unified_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._HyperPodPytorchJob
