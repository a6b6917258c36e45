"""What the launcher and the trainer share, torch-free: the config schema, batch math, the per-size
files and env vars, records, checkpoint directory names, errors."""
