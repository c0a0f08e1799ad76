"""Data: the embedded procedural dataset, real-data loaders (CIFAR, ImageFolder, digits), and
batched transforms (Mixer shuffles, small-image augmentation). Nothing is downloaded.

    ds = build_dataset("embedded", "train", img_size=32)          # 20k scenes, 10 classes (layout)
    loader = build_loader(ds, 128, train=True, seed=0)
    loader.set_epoch(epoch)                                        # exact replay of an epoch
    for x, y in loader: ...                                        # x (128,3,32,32) float, y (128,)
"""
from .loaders import (DATASETS, OPTIONS, SPLITS, FolderLoader, ImageFolderDataset,  # noqa: F401
                      InMemoryLoader, TensorImageDataset, build_dataset, build_loader, data_root)
from .synthetic import TASKS, cache_dir, generate, plot_class_grid, render, sample_scenes  # noqa: F401
from .transforms import (PixelPermutation, global_pixel_shuffle, normalize,  # noqa: F401
                         patch_pixel_shuffle, random_crop_flip)
