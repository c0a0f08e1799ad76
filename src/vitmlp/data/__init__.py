"""Data: the embedded procedural dataset, real-data loaders (CIFAR, ImageFolder, digits), and
batched transforms (Mixer shuffles, small-image augmentation). Nothing is downloaded.

    ds = build_dataset("embedded", "train", img_size=32)          # 20k scenes, 10 classes (layout)
    x, y = ds.get_batch(range(128))                                # x (128,3,32,32) float, y (128,)

Training reads batches through :class:`vitmlp.train.Batches` (order by seed and epoch, augmentation).
"""
from .loaders import (DATASETS, OPTIONS, SPLITS, ImageFolderDataset, TensorImageDataset,  # noqa: F401
                      build_dataset, data_root)
from .synthetic import TASKS, cache_dir, generate, plot_class_grid, render, sample_scenes  # noqa: F401
from .transforms import (PixelPermutation, global_pixel_shuffle, normalize,  # noqa: F401
                         patch_pixel_shuffle, random_crop_flip)
