"""From a composed recipe to a plan for every allowed node count: batches, instance types, memory."""
