"""How the trainer reads data: datasets as batches of positions, in an order fixed by (seed, epoch).

A dataset may be a :class:`vitmlp.data.TensorImageDataset` (``.images`` / ``.labels``), a
``TensorDataset`` (``.tensors``), an ``(images, labels)`` pair of tensors (all indexed in memory,
without a DataLoader), or any map-style Dataset (read through a DataLoader; an ImageFolder
brings its own augmentation). In-memory images are uint8 ``[N, C, h, w]``: they are turned into
float with the dataset's ``to_float`` (which also resizes) or ``/255``, augmented (training only),
and normalised with its ``mean`` / ``std`` (else ImageNet's). Float batches are taken as they are.
"""
from __future__ import annotations

import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from .config import TrainConfig


def build_data(cfg: TrainConfig):
    """(train, val) datasets of ``cfg`` from :func:`vitmlp.data.build_dataset`."""
    from ..data import build_dataset  # imported late: tests and custom data do without it
    train, val = (build_dataset(cfg.dataset, split, cfg.img_size, **cfg.dataset_options) for split in ("train", "val"))
    if cfg.augment != "none" and hasattr(train, "with_augmentation"):  # file-backed: timm's train transform
        train = train.with_augmentation(True)
    return train, val


def pixel_shuffle(cfg: TrainConfig):
    """The fixed pixel permutation of Mixer's Figure 4 (same for every image, train and val), or None."""
    if cfg.pixel_shuffle == "none":
        return None
    from ..data import global_pixel_shuffle, patch_pixel_shuffle
    if cfg.pixel_shuffle == "global":
        return global_pixel_shuffle(cfg.img_size)
    return patch_pixel_shuffle(cfg.img_size, cfg.shuffle_patch or cfg.model_options["patch_size"])


class Batches:
    """A dataset read as batches of positions, turned into model inputs by :meth:`inputs`."""

    def __init__(self, ds, size=None, *, augment=False, shuffle=None):
        pair = ((ds.images, ds.labels) if hasattr(ds, "images") and hasattr(ds, "labels") else
                ds.tensors[:2] if hasattr(ds, "tensors") else ds if isinstance(ds, (tuple, list)) else None)
        self.ds, (self.x, self.y) = ds, pair or (None, None)
        n = len(self.y) if pair else len(ds)
        if size and size > n:
            raise ValueError(f"asked for {size} examples, the dataset has {n}")
        # first `size` of one fixed permutation: subsets are nested and do not depend on the seed
        self.index = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:size].sort().values if size \
            else torch.arange(n)
        self.num_classes = getattr(ds, "num_classes", None) or (len(ds.classes) if hasattr(ds, "classes") else
                                                              int(self.y.max()) + 1 if pair else None)
        mean, std = getattr(ds, "mean", IMAGENET_DEFAULT_MEAN), getattr(ds, "std", IMAGENET_DEFAULT_STD)
        self.mean, self.std = (torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in (mean, std))
        self.to_float = getattr(ds, "to_float", lambda u8: u8.float() / 255)
        self.hflip_classes = getattr(ds, "hflip_classes", None)  # flipped class of each class, if not itself
        self.augment, self.shuffle = augment, shuffle

    def __len__(self):
        return len(self.index)

    def __call__(self, batches, workers=0):
        """(images, labels) of each list of positions in ``batches``."""
        if self.x is not None:
            return ((self.x[self.index[b]], self.y[self.index[b]]) for b in batches)
        sampler = [self.index[b].tolist() for b in batches]
        return iter(torch.utils.data.DataLoader(self.ds, batch_sampler=sampler, num_workers=workers))

    def inputs(self, x, y, device, gen: torch.Generator | None = None):
        """A raw batch as model input: uint8 [B, C, h, w] -> float [B, C, S, S] at img_size,
        CIFAR-style crop + flip drawn from ``gen`` (training), normalised; then the pixel shuffle.
        All of it on ``device`` (a GPU's host would otherwise be the bottleneck), with the random
        draws from ``gen`` on the CPU: the same inputs on any device."""
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if x.dtype == torch.uint8:
            x = self.to_float(x)
            if self.augment and gen is not None:
                from ..data import random_crop_flip
                x, y = random_crop_flip(x, y, gen, max(1, x.shape[-1] // 8), True, self.hflip_classes)
            x = (x - self.mean.to(device)) / self.std.to(device)
        return self.shuffle(x) if self.shuffle is not None else x, y


def epoch_batches(n: int, batch: int, seed: int, epoch: int, repeats: int = 1) -> torch.Tensor:
    """[steps, batch] positions for one epoch, a function of (seed, epoch) only; last partial dropped."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    if repeats > 1:  # repeated augmentation: k copies of fewer images, in the same global batch
        perm = perm[: -(-n // repeats)].repeat_interleave(repeats)[:n]
    steps = n // batch
    return perm[: steps * batch].view(steps, batch)
