"""MLP-Mixer (Tolstikhin et al. 2021): Table 1 variants, Appendix A.1 options, Appendix C growth.

Built on timm's ``MlpMixer``/``MixerBlock`` (timm/models/mlp_mixer.py); parameter names equal
timm's ``mixer_*`` models. D_S = C/2 and D_C = 4C for every row of Table 1.

    create_model("mixer_B16")                                  # Table 1
    create_model("mixer_S32", untied=True)                     # Appendix A.1
    create_model("mixer_S16", img_size=32, patch_size=4, width_mult=0.25)   # cpu profile
    grow_token_mixing(model, 2)                                # Appendix C: fine-tune at 2x resolution
    create_model("mixer_S16", img_size=64, token_mixing_growth=2)   # ... as a run: init_from grows the weights
    permuted_twin(model, patch_pixel_shuffle(224, 16))         # Figure 4: same function on shuffled images
    listing1_mlp_mixer(model, img)                             # Listing 1 on model's weights (reference)
"""
from __future__ import annotations

import copy
import math
import re
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from timm.layers import DropPath, Mlp
from timm.models.mlp_mixer import MixerBlock as TimmMixerBlock, MlpMixer

from .registry import check_choice, register, scale_depth, scale_width

SIZES = {"S": (8, 512), "B": (12, 768), "L": (24, 1024), "H": (32, 1280)}  # Table 1: layers, hidden C


class UntiedMlp(nn.Module):
    """``n`` independent MLPs in -> hidden -> in, MLP k applied to row k (Appendix A.1, untied)."""

    def __init__(self, n, in_features, hidden, act_layer=nn.GELU):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n, hidden, in_features))
        self.b1 = nn.Parameter(torch.zeros(n, hidden))
        self.w2 = nn.Parameter(torch.empty(n, in_features, hidden))
        self.b2 = nn.Parameter(torch.zeros(n, in_features))
        self.act = act_layer()
        self.init_weights()

    def init_weights(self):  # Xavier-uniform per MLP, like timm's init of the tied MLPs
        for w in (self.w1, self.w2):
            bound = math.sqrt(6 / (w.shape[1] + w.shape[2]))
            nn.init.uniform_(w, -bound, bound)
        nn.init.zeros_(self.b1), nn.init.zeros_(self.b2)

    def forward(self, x):  # x: (B, n, in)
        h = self.act(torch.einsum("bni,nhi->bnh", x, self.w1) + self.b1)  # (B, n, hidden)
        return torch.einsum("bnh,nih->bni", h, self.w2) + self.b2


class MixerBlock(TimmMixerBlock):
    """Listing 1's block: x + token_mixing(LN(x)^T)^T, then x + channel_mixing(LN(x)).
    ``groups`` G > 1 feeds the token MLP G neighbouring channels at once (S*G inputs, C/G rows);
    ``untied`` gives every row its own token MLP (Appendix A.1). One drop-path rate per MLP."""

    def __init__(self, dim, seq_len, mlp_ratio=(0.5, 4.0), *, groups=1, untied=False, act_layer=nn.GELU, **kw):
        super().__init__(dim, seq_len, mlp_ratio, act_layer=act_layer, **kw)
        self.groups = groups
        d_s = int(mlp_ratio[0] * dim)
        if untied:
            self.mlp_tokens = UntiedMlp(dim // groups, seq_len * groups, d_s, act_layer)
        elif groups > 1:
            self.mlp_tokens = Mlp(seq_len * groups, d_s, act_layer=act_layer)
        self.drop_path2 = self.drop_path

    def forward(self, x):  # x: (B, S, C)
        B, S, C = x.shape
        y = self.norm1(x).transpose(1, 2).reshape(B, C // self.groups, self.groups * S)  # columns of X
        y = self.mlp_tokens(y).reshape(B, C, S).transpose(1, 2)
        x = x + self.drop_path(y)
        return x + self.drop_path2(self.mlp_channels(self.norm2(x)))


_TOKEN_MLP = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")   # a token-mixing MLP's tensors


def _tied_token_mlp(blk: nn.Module, what: str) -> Mlp:
    """A block's token-mixing MLP, refused unless it is one MLP shared by all channels."""
    if getattr(blk, "groups", 1) != 1 or not isinstance(blk.mlp_tokens, Mlp):
        raise ValueError(f"{what} supports tied, ungrouped token mixing only")
    return blk.mlp_tokens


class Mixer(MlpMixer):
    """timm's MlpMixer, plus how it starts from a smaller-image Mixer's weights (the trainer's
    ``init_from``, Appendix C): token-mixing tensors made for K^2 fewer tokens are grown
    block-diagonally (``token_mixing_init="grow"``) or left out, so that the larger token-mixing
    MLPs keep their random initialisation (``"fresh"``, the naive alternative)."""
    token_mixing_init = "grow"

    def adapt_state_dict(self, sd: dict) -> dict:
        sd, own = dict(sd), self.state_dict()
        for i, blk in enumerate(self.blocks):
            k = f"blocks.{i}.mlp_tokens."
            if k + "fc1.weight" not in sd or sd[k + "fc1.weight"].shape == own[k + "fc1.weight"].shape:
                continue
            (D, S), (D2, S2) = sd[k + "fc1.weight"].shape, own[k + "fc1.weight"].shape
            K = math.isqrt(S2 // S)
            if self.token_mixing_init == "fresh" or not isinstance(blk.mlp_tokens, Mlp) or blk.groups != 1:
                for n in _TOKEN_MLP:
                    sd.pop(k + n, None)
                continue
            if K * K * S != S2 or K * K * D != D2:
                raise ValueError(f"{k}: cannot grow token mixing {D}x{S} to {D2}x{S2}: needs K^2 times the "
                                 f"tokens and hidden units (build with token_mixing_growth=K)")
            grid = tuple(g // K for g in self.stem.grid_size)
            grown = _grown_token_mlp(*(sd[k + n] for n in _TOKEN_MLP), grid, K)
            sd.update(zip((k + n for n in _TOKEN_MLP), grown))
        return sd


INIT_FOR_SHUFFLE = ("none", "patch")
TOKEN_MIXING_INIT = ("grow", "fresh")


@register("mixer", examples=["S32", "S16", "B32", "B16", "L32", "L16", "H14"])
def build(spec: str, *, img_size: int = 224, patch_size: int | None = None, in_chans: int = 3,
          num_classes: int = 1000, width_mult: float = 1.0, depth_mult: float = 1.0,
          untied: bool = False, groups: int = 1, drop_rate: float = 0.0,
          drop_path_rate: float = 0.0, token_mixing_growth: int = 1, token_mixing_init: str = "grow",
          init_for_shuffle: str = "none") -> MlpMixer:
    """Mixer-<S|B|L|H><patch>; ``drop_path_rate`` s rises linearly from 0 (first MLP) to s (last MLP),
    as in the paper's Supplementary B.

    token_mixing_growth K: token-mixing hidden width K^2 D_S, for fine-tuning at K times the
    pre-training resolution from that model (``init_from``; see :class:`Mixer` and token_mixing_init).
    init_for_shuffle "patch": the weights the plain model gets from the same seed, made into their
    :func:`permuted_twin` for the fixed patch+pixel shuffle of ``TrainConfig(pixel_shuffle="patch")``
    (``vitmlp.data.patch_pixel_shuffle(img_size, patch_size)``): trained on shuffled images, it then
    follows the plain run on the original images step by step (Figure 4)."""
    m = re.fullmatch(r"([A-Z])(\d+)", spec)
    if not m:
        raise ValueError(f"bad Mixer spec {spec!r}; expected <size><patch>, e.g. S32, B16, L16, H14")
    check_choice("Mixer size", m.group(1), SIZES)
    check_choice("token_mixing_init", token_mixing_init, TOKEN_MIXING_INIT)
    check_choice("init_for_shuffle", init_for_shuffle, INIT_FOR_SHUFFLE)
    layers, width = SIZES[m.group(1)]
    patch_size = patch_size or int(m.group(2))
    if img_size % patch_size:
        raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
    width, depth = scale_width(width, width_mult, 16), scale_depth(layers, depth_mult)
    if width % groups:
        raise ValueError(f"groups {groups} must divide the hidden size {width}")
    K = token_mixing_growth
    if not isinstance(K, int) or isinstance(K, bool) or K < 1 or (img_size // patch_size) % K:
        raise ValueError(f"token_mixing_growth must be a positive int dividing the patch grid side "
                         f"{img_size // patch_size}, got {K!r}")
    if K > 1 and (untied or groups != 1):
        raise ValueError("token_mixing_growth > 1 supports tied, ungrouped token mixing only")
    model = Mixer(img_size=img_size, patch_size=patch_size, in_chans=in_chans, num_classes=num_classes,
                  embed_dim=width, num_blocks=depth, mlp_ratio=(0.5 * K * K, 4.0),
                  block_layer=partial(MixerBlock, groups=groups, untied=untied), drop_rate=drop_rate)
    model.token_mixing_init = token_mixing_init
    rates = [drop_path_rate * i / max(1, 2 * depth - 1) for i in range(2 * depth)]
    for i, blk in enumerate(model.blocks):
        blk.drop_path, blk.drop_path2 = (DropPath(r) if r > 0 else nn.Identity() for r in rates[2 * i:2 * i + 2])
    if init_for_shuffle == "patch":
        from ..data.transforms import patch_pixel_shuffle  # the trainer's shuffle (seed 0)
        with torch.device("cpu"):  # an index, also when the model is built on the meta device
            shuffle = patch_pixel_shuffle(img_size, patch_size)
        model.load_state_dict(permuted_twin(model, shuffle).state_dict())
    return model


def token_mixing_weights(model: nn.Module) -> list[torch.Tensor]:
    """First token-mixing layer W_1 (D_S, S) of every block; ``w.reshape(-1, *model.stem.grid_size)``
    gives one image per hidden unit (Figures 5 and 6)."""
    return [blk.mlp_tokens.fc1.weight.detach() for blk in model.blocks]


def stem_filters(model: nn.Module) -> torch.Tensor:
    """Patch-embedding filters (C, in_chans, P, P) (Figure 7)."""
    return model.stem.proj.weight.detach()


@torch.no_grad()
def permuted_twin(model: MlpMixer, shuffle) -> MlpMixer:
    """Figure 4: a copy of ``model`` that computes on patch+pixel-shuffled images exactly what
    ``model`` computes on the original images: ``permuted_twin(m, s)(s(x)) == m(x)``, for a fixed
    shuffle ``s`` (a :class:`vitmlp.data.PixelPermutation` or its ``perm``) that moves whole patches
    (sigma) and reorders the pixels inside every patch the same way (pi).

    The stem filters take pi (a filter is a dot product over one patch's pixels) and every
    token-mixing MLP takes sigma (columns of W_1, rows of W_2 and b_2); every other layer acts on
    each token alone or averages the tokens. So Mixer trained on shuffled images is the same
    model family as Mixer on the originals, with permuted weights."""
    perm = torch.as_tensor(getattr(shuffle, "perm", shuffle), device="cpu").long()
    p, (gh, gw) = model.stem.patch_size[0], model.stem.grid_size
    if perm.shape != (gh * p * gw * p,):
        raise ValueError(f"the shuffle has {perm.numel()} pixels; the model's images have {gh * p * gw * p}")
    src = rearrange(perm.view(gh * p, gw * p), "(h p1) (w p2) -> (h w) (p1 p2)", p1=p, p2=p)  # (S, P*P) source pixel
    r, c = src // (gw * p), src % (gw * p)
    patch, pixel = (r // p) * gw + c // p, (r % p) * p + c % p     # source patch and pixel-in-patch
    if not ((patch == patch[:, :1]).all() and (pixel == pixel[:1]).all()):
        raise ValueError(f"not a patch+pixel shuffle of this model's {p}x{p} patches (one patch permutation "
                         "and one pixel permutation shared by all patches), e.g. a global pixel shuffle")
    sigma, pi = patch[:, 0], pixel[0]
    new = copy.deepcopy(model)
    w = new.stem.proj.weight                                        # (C, in, P, P)
    w.copy_(w.flatten(2)[:, :, pi].view_as(w))
    for blk in new.blocks:
        mlp = _tied_token_mlp(blk, "permuted_twin")
        mlp.fc1.weight.copy_(mlp.fc1.weight[:, sigma])             # (D_S, S): input token t is sigma[t]
        mlp.fc2.weight.copy_(mlp.fc2.weight[sigma])                 # (S, D_S): output token t is sigma[t]
        mlp.fc2.bias.copy_(mlp.fc2.bias[sigma])
    return new


def _grown_token_mlp(w1, b1, w2, b2, grid, K):
    """Appendix C on the tensors of one token-mixing MLP for a ``grid`` of tokens: (D, S), (D,),
    (S, D), (S,) -> (K^2 D, K^2 S), (K^2 D,), (K^2 S, K^2 D), (K^2 S,), block-diagonal over the K x K
    spatial parts of the K-times larger grid. Tokens stay in raster order over the whole grid, so
    the blocks are scattered accordingly."""
    (gh, gw), D = grid, w1.shape[0]
    r, c = torch.meshgrid(torch.arange(K * gh), torch.arange(K * gw), indexing="ij")
    part = ((r // gh) * K + c // gw).flatten()   # which K x K part each big-grid token lies in
    local = ((r % gh) * gw + c % gw).flatten()    # its raster index inside that part
    T = K * K * gh * gw
    tokens = torch.arange(T)
    W1 = w1.new_zeros(K * K, D, T)                # hidden unit (p, j) sees only part p
    W1[part, :, tokens] = w1[:, local].T
    W2 = w2.new_zeros(T, K * K, D)
    W2[tokens, part, :] = w2[local, :]
    return W1.view(K * K * D, T), b1.repeat(K * K), W2.view(T, K * K * D), b2[local]


@torch.no_grad()
def grow_token_mixing(model: MlpMixer, factor: int) -> MlpMixer:
    """Appendix C: a copy of ``model`` for images ``factor``=K times larger (K^2 S tokens): every
    token-mixing MLP gets hidden width K^2 D_S and block-diagonal weights, so each of the K x K
    spatial parts of the larger patch grid is processed exactly like the original image.
    Tokens stay in raster order over the whole grid, so the blocks are scattered accordingly."""
    K, grid = factor, model.stem.grid_size
    new = copy.deepcopy(model)
    for blk in new.blocks:
        old = _tied_token_mlp(blk, "grow_token_mixing")
        w1, b1, w2, b2 = _grown_token_mlp(old.fc1.weight, old.fc1.bias, old.fc2.weight, old.fc2.bias, grid, K)
        grown = copy.deepcopy(old)
        grown.fc1, grown.fc2 = nn.Linear(w1.shape[1], w1.shape[0]), nn.Linear(w2.shape[1], w2.shape[0])
        for lin, w, b in ((grown.fc1, w1, b1), (grown.fc2, w2, b2)):
            lin.weight.copy_(w), lin.bias.copy_(b)
        blk.mlp_tokens = grown
    new.stem.set_input_size(img_size=tuple(K * s for s in new.stem.img_size))
    return new


# Listing 1 (Supplementary E), the paper's Flax code line by line, in torch.nn.functional on the
# weights of a model built above: a reference that shares nothing with timm's modules.
# gelu="none" is the exact (erf) GELU of torch/timm; Flax's nn.gelu defaults to the tanh form.
def listing1_layernorm(norm, x):  # flax nn.LayerNorm: last axis, epsilon 1e-6
    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, eps=1e-6)


def listing1_mlp_block(mlp, x, gelu="none"):  # MlpBlock: Dense(mlp_dim) -> gelu -> Dense(x.shape[-1])
    check_choice("gelu", gelu, ("none", "tanh"))
    return F.linear(F.gelu(F.linear(x, mlp.fc1.weight, mlp.fc1.bias), approximate=gelu), mlp.fc2.weight, mlp.fc2.bias)


def listing1_mixer_block(blk, x, gelu="none"):  # MixerBlock, x: (B, S, C)
    y = listing1_layernorm(blk.norm1, x).swapaxes(1, 2)              # (B, C, S): the columns of X
    y = listing1_mlp_block(blk.mlp_tokens, y, gelu).swapaxes(1, 2)   # token mixing, back to (B, S, C)
    x = x + y
    return x + listing1_mlp_block(blk.mlp_channels, listing1_layernorm(blk.norm2, x), gelu)


def listing1_mlp_mixer(model, img, gelu="none"):  # MlpMixer, img: (B, 3, H, W) -> (B, classes)
    s = model.stem.patch_size
    x = F.conv2d(img, model.stem.proj.weight, model.stem.proj.bias, stride=s)  # 'stem': (B, C, H/P, W/P)
    x = rearrange(x, "n c h w -> n (h w) c")                                    # (B, S, C)
    for blk in model.blocks:
        x = listing1_mixer_block(blk, x, gelu)
    x = listing1_layernorm(model.norm, x).mean(dim=1)  # pre_head_layer_norm, mean over tokens: (B, C)
    return F.linear(x, model.head.weight, model.head.bias)
