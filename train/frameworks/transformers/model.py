"""The Trainer's model and data, as both workloads use them."""
import os
import shutil

from torch import nn

from train.toolkit.model import small_cnn, weights_digest


WEIGHTS = "model.safetensors"  # what Trainer._save writes for a model that is not a PreTrainedModel


class Classifier(nn.Module):
    """small_cnn as the Trainer wants a model: forward takes the batch's keys, returns loss and logits."""

    def __init__(self):
        super().__init__()
        self.net = small_cnn(1)

    def forward(self, pixel_values, labels=None):
        logits = self.net(pixel_values)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def digest(state) -> str:
    """weights_digest in name order: a state dict, the tensors written, the tensors read (safetensors
    keeps its own order) all hash alike."""
    return weights_digest({name: state[name] for name in sorted(state)})


def examples(x, y) -> list:
    return [{"pixel_values": image, "labels": label} for image, label in zip(x, y)]


def epoch_of(state) -> int:
    """The epoch (0-based) that just ended, from the Trainer's state (epoch counts completed epochs)."""
    return round(state.epoch) - 1


def remove_contents(folder: str):
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
