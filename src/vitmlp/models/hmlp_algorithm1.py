"""Algorithm 1 of "Three things" (Appendix C): the hMLP stem as printed, and a loader of the book's weights.

``hMLP_stem`` is the listing as printed, spacing and names included (``nn.SyncBatchNorm`` too:
without a process group it normalises like ``BatchNorm2d``). The listing fixes the kernels 4, 2, 2,
so it describes patch 16 only. The paper prints no code for the LN variant; the text puts LN where
BN is (the official deit ``models_v2.py`` makes it an argument, ``norm_layer=nn.SyncBatchNorm``),
which is what ``from_book`` does for the book's ``hmlp_ln`` (LN over the channels at every position).

    ref = from_book(make_stem("hmlp_bn", img_size=224, patch_size=16, embed_dim=768))
    (ref(x) - book(x)).abs().max()     # 0 in float64: the same operations
"""
from __future__ import annotations

import re

import torch
import torch.nn as nn
from timm.layers import LayerNorm2d


class hMLP_stem(nn.Module):
    """ Image to Patch Embedding
    """
    def __init__(self, img_size=(224,224), patch_size=(16,16), in_chans=3, embed_dim=768):
        super().__init__()
        num_patches = (img_size[1] // patch_size[1]) * (img_size[0] // patch_size[0])
        self.img_size = img_size
        self.patch_size = patch_size
        self.num_patches = num_patches
        self.proj = torch.nn.Sequential(
            *[nn.Conv2d(in_chans, embed_dim//4, kernel_size=4, stride=4),
              nn.SyncBatchNorm(embed_dim//4),
              nn.GELU(),
              nn.Conv2d(embed_dim//4, embed_dim//4, kernel_size=2, stride=2),
              nn.SyncBatchNorm(embed_dim//4),
              nn.GELU(),
              nn.Conv2d(embed_dim//4, embed_dim, kernel_size=2, stride=2),
              nn.SyncBatchNorm(embed_dim),
            ])

    def forward(self, x):
        B, C, H, W = x.shape
        x = self.proj(x).flatten(2).transpose(1, 2)
        return x


# The book's ConvStem names (layers -> proj -> post) -> the listing's one Sequential ``proj``.
NAME_MAP = [(r"^layers\.([0-5])\.", r"proj.\1."), (r"^proj\.", "proj.6."), (r"^post\.0\.", "proj.7.")]


def algorithm1_name(book_name: str) -> str:
    for pattern, repl in NAME_MAP:
        if re.search(pattern, book_name):
            return re.sub(pattern, repl, book_name)
    raise ValueError(f"parameter {book_name!r} has no counterpart in Algorithm 1")


@torch.no_grad()
def from_book(stem: nn.Module) -> hMLP_stem:
    """Algorithm 1's stem carrying the weights (and BN statistics) of the book's ``hmlp_bn`` or
    ``hmlp_ln`` stem; same train/eval mode and dtype."""
    convs = [(m.kernel_size[0], m.stride[0]) for m in stem.modules() if isinstance(m, nn.Conv2d)]
    norms = {type(m) for m in stem.modules() if isinstance(m, (nn.BatchNorm2d, LayerNorm2d))}
    if convs != [(4, 4), (2, 2), (2, 2)] or len(norms) != 1:
        raise ValueError("Algorithm 1 describes the hMLP stem at patch 16 (kernels = strides 4, 2, 2) with BN "
                         f"or LN; got (kernel, stride) {convs} and norms {sorted(t.__name__ for t in norms)}")
    ref = hMLP_stem(stem.img_size, stem.patch_size, stem.layers[0].in_channels, stem.proj.out_channels)
    if norms == {LayerNorm2d}:  # the text's LN in the place of each BN
        for i in (1, 4, 7):
            ref.proj[i] = LayerNorm2d(ref.proj[i].num_features)
    ref = ref.to(next(stem.parameters()).dtype)
    ref.load_state_dict({algorithm1_name(n): v for n, v in stem.state_dict().items()}, strict=True)
    return ref.train(stem.training)
