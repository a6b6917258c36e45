"""What survives a resize: checkpoints (checkpoint) and the position in the data stream (sampler)."""
