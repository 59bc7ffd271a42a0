"""The data each rank trains on. Every rank builds the same split from the seed; fastai's DistributedDL
then gives each rank its shard of every batch (other frameworks: their own distributed samplers).
Importing this module imports no framework."""
import torch.distributed as dist


def digits_dls(data: dict, seed: int, device):
    """scikit-learn's bundled 8x8 digits, two classes, as 1x8x8 images in [0, 1] (the split every
    framework trains on: train/toolkit/), in fastai's DataLoaders."""
    from fastai.data.core import DataLoaders

    from train.toolkit.model import digits_split

    x_train, y_train, x_valid, y_valid = digits_split(data, seed)
    return DataLoaders.from_dsets(list(zip(x_train, y_train)), list(zip(x_valid, y_valid)),
                                  bs=data["batch_size"], device=device, num_workers=0)


def mnist_sample_dls(data: dict, seed: int, device):
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


def make_dls(data: dict, seed: int, device):
    return LOADERS[data["name"]](data, seed, device)
