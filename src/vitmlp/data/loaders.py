"""One entry point for every data set: ``build_dataset(name, split, img_size, root=..., **options)``.

Data sets come out un-augmented and normalised. Data held in memory (embedded, CIFAR, digits) is
a :class:`TensorImageDataset` of uint8 images, which the trainer's :class:`vitmlp.train.Batches`
indexes a batch at a time (no per-sample Python) and augments; ImageFolder trees are read through a
torch DataLoader with timm's transforms. Nothing is downloaded.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from . import synthetic
from ..choices import check_choice
from ..records import config_hash
from .transforms import normalize

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
                              info=dict(config, config_hash=config_hash(config)))


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
