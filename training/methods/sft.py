"""Supervised fine-tuning: next-token cross-entropy on the assistant's tokens (prompt tokens masked),
averaged over the label tokens of the whole global batch."""

from __future__ import annotations

import torch

from training.batches import collate
from training.contract.sft_args import DATA_FORMAT
from training.methods.base import TrainingMethod, model_inputs, reducing_on_the_last


class SFT(TrainingMethod):
    data_format = DATA_FORMAT

    def collate(self, rows: list[dict]) -> dict:
        return collate(rows, self.shape)

    def forward_backward(self, model, micro_batches, label_tokens, global_batch, documents=None):
        # The summed token loss over the step's global label-token count (FSDP sums the ranks'
        # gradients): the gradient of the global mean at any size or split.
        scale = 1 / label_tokens.clamp(min=1).float()  # a step without label tokens contributes nothing
        # An MoE whose routers train adds their load-balancing loss, averaged over the step's samples.
        balancing = model.routers is not None and documents is not None
        balance_scale = (model.balance_coef / documents.clamp(min=1)).float() if balancing else None
        loss_sum, balance_sum = torch.zeros((), device=self.device), torch.zeros((), dtype=torch.float64, device=self.device)
        for micro in reducing_on_the_last(model, micro_batches):
            inputs = model_inputs(micro, self.device)
            if balancing:
                inputs.update(document_index=micro["document_index"].to(self.device, non_blocking=True),
                              documents=micro["documents"])
            loss = model(**inputs)
            objective = loss * scale
            if model.balance_loss is not None:
                objective = objective + model.balance_loss * balance_scale
                balance_sum += model.balance_loss.detach() / documents.clamp(min=1)
            objective.backward()
            loss_sum += loss.detach()
        return loss_sum, {"router_balance_loss": balance_sum} if balancing else {}

    def step_metrics(self, loss_sum, sums, label_tokens, global_batch):
        balance = {"router_balance_loss": sums["router_balance_loss"]} if "router_balance_loss" in sums else {}
        return {"loss": loss_sum / label_tokens if label_tokens else None, **balance}  # the balance: the samples' mean

    def eval_sums(self, model, batch, step):
        loss = model(**model_inputs(batch, self.device))  # stays on the device: no host sync per batch
        return {"loss": loss.double(), "label_tokens": float(batch["label_tokens"])}  # float64 over batches

    def eval_metrics(self, sums):
        return {"eval_loss": sums["loss"] / max(sums["label_tokens"], 1)}


METHOD = SFT
