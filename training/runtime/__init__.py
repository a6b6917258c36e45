"""One launch of the trainer: the training loop (train), elastic signals (elastic), the HyperPod agent
(agent), topology, the model's files (snapshot), metrics."""
