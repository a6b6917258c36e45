"""Evaluate a trained model on benchmarks: lm-eval's tasks with the vendor's recipes' keys, resumable at any
size (work_store), against its base (scores). The command line: training/evaluate/__main__.py."""
