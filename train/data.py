"""The data each rank trains on. Every rank builds the same split from the seed;
fastai's DistributedDL then gives each rank its shard of every batch."""
import numpy as np
import torch
import torch.distributed as dist
from fastai.data.core import DataLoaders


_digits = None  # (x, y) as load_digits returns them, read once per process (the forkserver's preload)


def preload_digits():
    """Read the bundled digits once; ranks forked afterwards share them. The same arrays either way."""
    global _digits
    if _digits is None:
        from sklearn.datasets import load_digits

        _digits = load_digits(return_X_y=True)
    return _digits


def digits_dls(data: dict, seed: int, device) -> DataLoaders:
    """scikit-learn's bundled 8x8 digits, two classes, as 1x8x8 images in [0, 1]."""
    x, y = preload_digits()
    classes = list(data["classes"])
    keep = np.isin(y, classes)
    x = torch.tensor(x[keep] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor([classes.index(v) for v in y[keep]])
    order = np.random.RandomState(seed).permutation(len(y))
    n_valid = int(len(y) * data["valid_pct"])
    valid, train = order[:n_valid], order[n_valid:]
    return DataLoaders.from_dsets(list(zip(x[train], y[train])), list(zip(x[valid], y[valid])),
                                  bs=data["batch_size"], device=device, num_workers=0)


def mnist_sample_dls(data: dict, seed: int, device) -> DataLoaders:
    """fastai's MNIST_SAMPLE (3 vs 7), downloaded by rank 0 while the others wait."""
    from fastai.data.external import untar_data
    from fastai.vision.data import ImageDataLoaders

    if dist.get_rank() == 0:
        path = untar_data(data["url"])
    dist.barrier()
    if dist.get_rank() != 0:
        path = untar_data(data["url"])
    return ImageDataLoaders.from_folder(path, train="train", valid="valid", bs=data["batch_size"],
                                        device=device, seed=seed, num_workers=0)


LOADERS = {"digits": digits_dls, "mnist_sample": mnist_sample_dls}
CHANNELS = {"digits": 1, "mnist_sample": 3}


def make_dls(data: dict, seed: int, device) -> DataLoaders:
    return LOADERS[data["name"]](data, seed, device)
