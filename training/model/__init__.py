"""The model: transformers' causal LM sharded with FSDP2 (causal_lm), LoRA, attention, masks, routed
experts, the optimizer, and the memory trace of a step."""
