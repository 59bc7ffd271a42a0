"""The same small model and data for every framework, as plain torch, and a digest of weights."""
import hashlib

import numpy as np
import torch
from torch import nn


def weights_digest(state) -> str:
    """A short hash of a state dict's weights (name -> tensor), to tell which checkpoint a rank holds."""
    h = hashlib.sha256()
    for name, tensor in state.items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# --- the same small model and data for every framework ------------------------------------------------

def conv_layer(n_in: int, n_out: int) -> nn.Sequential:
    """fastai's ConvLayer(n_in, n_out, ks=3, stride=2): conv without bias, batch norm, ReLU."""
    return nn.Sequential(nn.Conv2d(n_in, n_out, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(n_out),
                         nn.ReLU())


def small_cnn(channels: int) -> nn.Sequential:
    """The seed's simple_cnn((channels, 16, 16, 2)) in plain torch: what fastai's SimpleCNN builds."""
    return nn.Sequential(conv_layer(channels, 16), conv_layer(16, 16),
                         nn.Sequential(nn.Conv2d(16, 2, 3, stride=2, padding=1), nn.ReLU()),  # no norm on the last
                         nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))


def digits_split(data: dict, seed: int):
    """scikit-learn's bundled 8x8 digits, two classes, as 1x8x8 images in [0, 1]: (x_train, y_train,
    x_valid, y_valid), the same split on every rank and for every framework."""
    from train.toolkit.data import preload_digits

    x, y = preload_digits()
    classes = list(data["classes"])
    keep = np.isin(y, classes)
    x = torch.tensor(x[keep] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor([classes.index(v) for v in y[keep]])
    order = np.random.RandomState(seed).permutation(len(y))
    n_valid = int(len(y) * data["valid_pct"])
    valid, train = order[:n_valid], order[n_valid:]
    return x[train], y[train], x[valid], y[valid]
