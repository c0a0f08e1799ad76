"""One entry point for every data set: ``build_dataset(name, split, img_size, root=..., **options)``
and one for batches: ``build_loader(dataset, batch_size, train=..., seed=...)``.

Data sets come out un-augmented and normalised; the loader adds training augmentation. Data held
in memory (embedded, CIFAR, digits) is a :class:`TensorImageDataset` of uint8 images, read by
:class:`InMemoryLoader` a batch at a time (no per-sample Python). ImageFolder trees go through a
torch DataLoader with timm's transforms. Both loaders are replayable: the batches of
``set_epoch(e, start_batch=k)`` depend only on (seed, e, k), which is what exact resume needs.
Nothing is downloaded.
"""
from __future__ import annotations

import copy
import math
import os
import random
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Sampler

from . import synthetic
from .synthetic import check_choice
from .transforms import normalize, random_crop_flip, seeded_generator

SPLITS = ("train", "val", "test")
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

# Options of each data set and their defaults (anything else is refused).
OPTIONS = {
    "embedded": dict(n=None, seed=0, difficulty=0.5, cache=True, task="layout"),
    "embedded_transfer": dict(n=None, seed=0, difficulty=0.5, cache=True),
    "cifar10": dict(verify_md5=True),
    "cifar100": dict(verify_md5=True),
    "imagefolder": dict(crop_pct=0.875, train_transform={}),
    "digits": dict(),
}
DATASETS = tuple(OPTIONS)
# Default sizes of the embedded splits (train, val, test); the transfer set is the smaller target.
EMBEDDED_N = {"embedded": dict(train=20000, val=2000, test=5000),
              "embedded_transfer": dict(train=5000, val=1000, test=2000)}


def data_root() -> Path:
    """Default root of real data sets: $VITMLP_DATA, else $VITMLP_CACHE/datasets."""
    env = os.environ.get("VITMLP_DATA")
    return Path(env).expanduser() if env else synthetic.cache_dir() / "datasets"


class TensorImageDataset(Dataset):
    """uint8 images (N,C,h,w) in memory; samples come out as normalised float (C,S,S), S=img_size.

    Images stored at another size are resized (bilinear, antialiased) on access.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, classes, *, img_size: int,
                 mean, std, name: str, split: str, hflip_classes=None, info: dict | None = None):
        assert images.dtype == torch.uint8 and images.ndim == 4 and len(images) == len(labels)
        self.images, self.labels = images, labels.long()
        self.classes, self.img_size = list(classes), int(img_size)
        self.mean, self.std, self.name, self.split = tuple(mean), tuple(std), name, split
        self.hflip_classes = hflip_classes
        self.info = {**dict(name=name, split=split, img_size=self.img_size, n=len(labels)), **(info or {})}

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self):
        return len(self.labels)

    def to_float(self, u8: torch.Tensor) -> torch.Tensor:
        """uint8 (B,C,h,w) -> float (B,C,S,S) in [0, 1] at ``img_size``."""
        x = u8.float().div_(255)
        if x.shape[-1] != self.img_size or x.shape[-2] != self.img_size:
            x = F.interpolate(x, size=(self.img_size, self.img_size), mode="bilinear",
                              align_corners=False, antialias=True).clamp_(0, 1)
        return x

    def get_batch(self, index) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised float images (B,C,S,S) and labels (B,) of the given indices."""
        index = torch.as_tensor(index, dtype=torch.long)
        return normalize(self.to_float(self.images[index]), self.mean, self.std), self.labels[index]

    def __getitem__(self, i):
        x, y = self.get_batch([i])
        return x[0], int(y[0])

    def __repr__(self):
        return (f"{type(self).__name__}({self.name}/{self.split}, n={len(self)}, "
                f"{self.num_classes} classes, {self.img_size}px)")


class ImageFolderDataset(Dataset):
    """A torchvision ImageFolder with timm's eval transform; ``with_augmentation(True)`` gives the
    same files with timm's training transform (RandomResizedCrop, flip, colour jitter, ...)."""

    def __init__(self, folder: Path, *, img_size: int, split: str, crop_pct: float,
                 train_transform: dict, augment: bool = False):
        from timm.data import create_transform
        from torchvision.datasets import ImageFolder
        self.img_size, self.split, self.name, self.augment = int(img_size), split, "imagefolder", augment
        self.mean, self.std, self.hflip_classes = IMAGENET_MEAN, IMAGENET_STD, None
        kw = dict(mean=IMAGENET_MEAN, std=IMAGENET_STD)
        self._eval_tf = create_transform(img_size, is_training=False, crop_pct=crop_pct, **kw)
        self._train_tf = create_transform(img_size, is_training=True, **{**kw, **train_transform})
        self.folder = ImageFolder(str(folder), transform=self._train_tf if augment else self._eval_tf)
        self.classes = list(self.folder.classes)
        self.info = dict(name="imagefolder", split=split, img_size=self.img_size, n=len(self.folder),
                         root=str(folder), crop_pct=crop_pct, train_transform=dict(train_transform))

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def with_augmentation(self, augment: bool) -> "ImageFolderDataset":
        other = copy.copy(self)
        other.augment = augment
        other.folder = copy.copy(self.folder)
        other.folder.transform = self._train_tf if augment else self._eval_tf
        return other

    def __len__(self):
        return len(self.folder)

    def __getitem__(self, i):
        return self.folder[i]


# --------------------------------------------------------------------------- builders

def build_dataset(name: str, split: str, img_size: int, root=None, **options) -> Dataset:
    """A data set by name: ``embedded`` (10 classes: 2..6 objects in a row or a column;
    ``task="arrangement"`` for the 10 purely relational three-object classes),
    ``embedded_transfer`` (6 classes: how many key objects, 2..7), ``cifar10``, ``cifar100``,
    ``imagefolder`` (root/train/<class>/*.jpg, root/val/...), ``digits`` (scikit-learn's bundled
    8x8 digits as RGB).

    ``root``: cache directory for the embedded sets, data directory otherwise (default
    :func:`data_root`). ``val`` of CIFAR and digits is their test split (they have no other);
    ``test`` of an ImageFolder is ``root/test`` if present, else ``root/val``.
    """
    check_choice("dataset", name, DATASETS)
    check_choice("split", split, SPLITS)
    for key in options:
        check_choice(f"option for dataset {name}", key, OPTIONS[name])
    opts = {**OPTIONS[name], **options}
    if int(img_size) < 4:
        raise ValueError(f"img_size must be >= 4, got {img_size}")
    return _BUILDERS[name](name, split, int(img_size), root, **opts)


def _embedded(name, split, img_size, root, *, n, seed, difficulty, cache, task="count"):
    if name == "embedded":
        check_choice("task of dataset embedded", task, ("layout", "arrangement"))
    n = EMBEDDED_N[name][split] if n is None else n
    images, labels, config = synthetic.generate(task, split, n, img_size, seed, difficulty, cache, root)
    return TensorImageDataset(images, labels, synthetic.TASKS[task], img_size=img_size,
                              mean=synthetic.MEAN, std=synthetic.STD, name=name, split=split,
                              hflip_classes=synthetic.HFLIP[task],
                              info=dict(config, config_hash=synthetic.config_hash(config)))


def _cifar(name, split, img_size, root, *, verify_md5):
    from torchvision import datasets
    cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
    if not verify_md5:   # for stand-ins (tests): check that the files exist, not their checksums
        cls = type(cls.__name__, (cls,), dict(
            train_list=[[f, None] for f, _ in cls.train_list],
            test_list=[[f, None] for f, _ in cls.test_list],
            meta={**cls.meta, "md5": None}))
    root = Path(root).expanduser() if root is not None else data_root()
    try:
        ds = cls(str(root), train=(split == "train"), download=False)
    except RuntimeError as e:
        files = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
        raise FileNotFoundError(
            f"{name} not found under {root}: expected the extracted '{cls.base_folder}/' directory "
            f"({', '.join(files)}) there. Nothing is downloaded here: fetch {cls.url} elsewhere, "
            f"extract it into {root} (or pass root=... / set VITMLP_DATA). ({e})") from None
    images = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))  # (N,3,32,32)
    mean, std = (CIFAR10_MEAN, CIFAR10_STD) if name == "cifar10" else (CIFAR100_MEAN, CIFAR100_STD)
    return TensorImageDataset(images, torch.as_tensor(ds.targets), ds.classes, img_size=img_size,
                              mean=mean, std=std, name=name, split=split,
                              info=dict(root=str(root), source_split="train" if split == "train" else "test"))


def _imagefolder(name, split, img_size, root, *, crop_pct, train_transform):
    if root is None:
        raise ValueError("imagefolder needs root=<dir> holding train/<class>/*.jpg and val/<class>/*.jpg")
    root = Path(root).expanduser()
    sub = {"train": "train", "val": "val", "test": "test" if (root / "test").is_dir() else "val"}[split]
    if not (root / sub).is_dir():
        raise FileNotFoundError(f"imagefolder split {split!r}: directory {root / sub} not found "
                                f"(expected root/train/<class>/*.jpg and root/val/<class>/*.jpg)")
    return ImageFolderDataset(root / sub, img_size=img_size, split=split, crop_pct=crop_pct,
                              train_transform=dict(train_transform))


def _digits(name, split, img_size, root, **_):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()                                              # bundled with scikit-learn
    u8 = torch.from_numpy(np.round(d.images * (255 / 16)).astype(np.uint8))   # (1797,8,8), 0..16 -> 0..255
    images = u8[:, None].expand(-1, 3, -1, -1).contiguous()        # grey -> RGB (N,3,8,8)
    tr, te = train_test_split(np.arange(len(d.target)), test_size=0.3, random_state=0,
                              stratify=d.target)                   # fixed: 1257 train / 540 test
    idx = torch.as_tensor(np.sort(tr if split == "train" else te))
    train_px = images[torch.as_tensor(tr)].float() / 255
    mean, std = (float(train_px.mean()),) * 3, (float(train_px.std()),) * 3
    return TensorImageDataset(images[idx], torch.as_tensor(d.target)[idx], [str(i) for i in range(10)],
                              img_size=img_size, mean=mean, std=std, name=name, split=split,
                              info=dict(source_split="train" if split == "train" else "test"))


_BUILDERS = dict(embedded=_embedded, embedded_transfer=_embedded, cifar10=_cifar, cifar100=_cifar,
                 imagefolder=_imagefolder, digits=_digits)


# --------------------------------------------------------------------------- loaders

class InMemoryLoader:
    """Batches of a :class:`TensorImageDataset` by indexing its uint8 tensor: shuffle with a
    permutation, then augment the whole batch (random crop with padding + flip).

    The order of epoch ``e`` depends on (seed, e), the augmentation of batch ``k`` on (seed, e, k):
    ``set_epoch(e, start_batch=k)`` replays an interrupted epoch exactly.
    """

    def __init__(self, dataset: TensorImageDataset, batch_size: int, *, shuffle: bool, augment: bool,
                 seed: int = 0, drop_last: bool = False, pad: int | None = None, flip: bool = True,
                 batch_transform=None):
        self.dataset, self.batch_size, self.shuffle, self.augment = dataset, int(batch_size), shuffle, augment
        self.seed, self.drop_last, self.flip, self.batch_transform = seed, drop_last, flip, batch_transform
        self.pad = max(1, dataset.img_size // 8) if pad is None else pad     # 4 px at 32 px (CIFAR)
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = int(epoch), int(start_batch)

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        ds, bs = self.dataset, self.batch_size
        order = (torch.randperm(len(ds), generator=seeded_generator(self.seed, self.epoch))
                 if self.shuffle else torch.arange(len(ds)))
        for k in range(self.start_batch, len(self)):
            idx = order[k * bs:(k + 1) * bs]
            x, y = ds.images[idx], ds.labels[idx]                              # uint8 (B,C,h,w)
            native = x.shape[-1] == ds.img_size and x.shape[-2] == ds.img_size
            if not native:
                x = ds.to_float(x)                                            # resize first
            if self.augment:                                                  # cheaper on uint8
                x, y = random_crop_flip(x, y, seeded_generator(self.seed, self.epoch, k), self.pad,
                                        self.flip, ds.hflip_classes)
            x = normalize(ds.to_float(x) if native else x, ds.mean, ds.std)  # (B,C,S,S) float
            if self.batch_transform is not None:
                x = self.batch_transform(x)
            yield x, y


class _EpochSampler(Sampler):
    def __init__(self, n, shuffle, seed):
        self.n, self.shuffle, self.seed, self.epoch, self.start = n, shuffle, seed, 0, 0

    def __iter__(self):
        order = (torch.randperm(self.n, generator=seeded_generator(self.seed, self.epoch))
                 if self.shuffle else torch.arange(self.n))
        return iter(order[self.start:].tolist())

    def __len__(self):
        return self.n - self.start


class _PerSampleSeed(Dataset):
    """Seeds torch and Python ``random`` from (seed, epoch, index) around each sample, so a
    sample's augmentation does not depend on which worker loads it or on batches skipped before
    it (exact resume); the caller's random state is restored afterwards."""

    def __init__(self, dataset, seed: int):
        self.dataset, self.seed, self.epoch = dataset, seed, 0

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        s = int(np.random.SeedSequence([self.seed, self.epoch, int(i)]).generate_state(1)[0])
        state = random.getstate()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            random.seed(s)
            try:
                return self.dataset[i]
            finally:
                random.setstate(state)


class FolderLoader:
    """torch DataLoader over a file-backed data set with the same interface as InMemoryLoader:
    the order comes from (seed, epoch), each sample's augmentation from (seed, epoch, index), so
    ``set_epoch(e, start_batch=k)`` replays batches exactly, with any number of workers."""

    def __init__(self, dataset, batch_size, *, shuffle, augment, seed=0, drop_last=False,
                 num_workers=0, batch_transform=None):
        if hasattr(dataset, "with_augmentation"):
            dataset = dataset.with_augmentation(augment)
        self.dataset, self.batch_size, self.seed, self.drop_last = dataset, batch_size, seed, drop_last
        self.num_workers, self.batch_transform = num_workers, batch_transform
        self.sampler = _EpochSampler(len(dataset), shuffle, seed)
        self._seeded = _PerSampleSeed(dataset, seed)
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = int(epoch), int(start_batch)

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        self.sampler.epoch, self.sampler.start = self.epoch, self.start_batch * self.batch_size
        self._seeded.epoch = self.epoch                       # copied into workers at iter() time
        dl = DataLoader(self._seeded, self.batch_size, sampler=self.sampler, drop_last=self.drop_last,
                        num_workers=self.num_workers,   # own generator: leaves the global RNG alone
                        generator=seeded_generator(self.seed, self.epoch, 2**31 - 1))
        for x, y in dl:
            yield (x if self.batch_transform is None else self.batch_transform(x)), y


def build_loader(dataset, batch_size: int, *, train: bool, seed: int = 0, augment: bool | None = None,
                 drop_last: bool | None = None, batch_transform=None, num_workers: int = 0, **kw):
    """Batches of (normalised float images, labels). ``train`` sets the defaults: shuffle,
    augment and drop_last on for training, off for evaluation. ``batch_transform`` (e.g. a Mixer
    shuffle from :mod:`vitmlp.data.transforms`) is applied to every normalised batch."""
    augment = train if augment is None else augment
    drop_last = train if drop_last is None else drop_last
    if isinstance(dataset, TensorImageDataset):
        for key in kw:
            check_choice("in-memory loader option", key, ("pad", "flip"))
        return InMemoryLoader(dataset, batch_size, shuffle=train, augment=augment, seed=seed,
                              drop_last=drop_last, batch_transform=batch_transform, **kw)
    for key in kw:
        check_choice("folder loader option", key, ())
    return FolderLoader(dataset, batch_size, shuffle=train, augment=augment, seed=seed,
                        drop_last=drop_last, num_workers=num_workers, batch_transform=batch_transform)
