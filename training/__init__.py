"""The training entrypoint that runs in the container: `python -m training --config-dir DIR`.

Importing this package is cheap and torch-free, so the launcher can share `training.contract.config`.
"""
