"""Tiny models and data for the trainer tests; run as a script it is one DDP worker:

    torchrun --standalone --nproc_per_node=2 tests/ddp_worker.py RECORDS CACHE CONFIG_JSON OUT_DIR

(each rank writes OUT_DIR/rank<r>.json: ranks printing to one pipe could interleave)
"""
from __future__ import annotations

import json
import os
import sys

import torch
import torch.nn as nn
from timm.models.vision_transformer import VisionTransformer


def tiny_model(name: str, options: dict) -> nn.Module:
    """Stand-ins for vitmlp.models.create_model: no dropout, no BatchNorm (DDP == 1 process)."""
    opts = dict(options)
    num_classes, img_size, patch = opts.pop("num_classes"), opts.pop("img_size", 8), opts.pop("patch_size", 4)
    opts.pop("width_mult", None), opts.pop("depth_mult", None)  # the profiles' scale knobs: unused here
    if name == "tiny_mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(3 * img_size * img_size, 32), nn.GELU(), nn.Linear(32, num_classes))
    if name == "tiny_vit":
        return VisionTransformer(img_size=img_size, patch_size=patch, embed_dim=16, depth=2, num_heads=2, mlp_ratio=2,
                                 num_classes=num_classes, **opts)
    raise ValueError(f"unknown model {name!r}; valid choices: tiny_mlp, tiny_vit")


def tiny_data(n_train: int = 256, n_val: int = 128, img_size: int = 8, seed: int = 0):
    """uint8 images whose 4 labels depend on brightness and redness: learnable in a few steps."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n_train + n_val, 3, img_size, img_size), dtype=torch.uint8, generator=g)
    f = x.float()
    y = (f.mean((1, 2, 3)) > 127.5).long() + 2 * (f[:, 0].mean((1, 2)) > f[:, 1].mean((1, 2))).long()
    ds = torch.utils.data.TensorDataset
    return ds(x[:n_train], y[:n_train]), ds(x[n_train:], y[n_train:])


if __name__ == "__main__":
    from vitmlp.train import trainer

    records, cache, config, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    trainer.build_model = tiny_model
    torch.set_num_threads(1)
    rec = trainer.train(config, data=tiny_data(), records=records, cache=cache, progress=False)
    rank = int(os.environ.get("RANK", 0))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world_size": rec["world_size"], "status": rec["status"]}, f)
