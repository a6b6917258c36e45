"""Compose, validate, render and act on elastic training jobs. Never imports torch."""
