"""Stems: shapes, hMLP/masking commutation (Three things Alg. 1), DPN on raw pixels, Scaled ReLU
conv-stem components (Tables 2, 3) and its parameter claim (DeiT-S 22M -> 23M)."""
import pytest
import torch
import torch.nn as nn
from einops import rearrange

from vitmlp.measure import count_params
from vitmlp.models import create_model
from vitmlp.models.stems import DPN_VARIANTS, SCALED_RELU_STEMS, STEMS, make_stem, volo_strides

torch.manual_seed(0)


def _stem(kind, img=64, patch=16, dim=32, **kw):
    stem = make_stem(kind, img_size=img, patch_size=patch, in_chans=3, embed_dim=dim, **kw)
    for m in stem.modules():  # non-trivial eval statistics, so BN is not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
    return stem.eval()


@pytest.mark.parametrize("kind", STEMS)
@pytest.mark.parametrize("img,patch", [(64, 16), (32, 4)])
def test_stem_maps_image_to_tokens(kind, img, patch):
    stem = _stem(kind, img, patch)
    tokens = stem(torch.randn(2, 3, img, img))
    assert tokens.shape == (2, (img // patch) ** 2, 32)
    assert stem.num_patches == (img // patch) ** 2
    assert isinstance(stem.proj, (nn.Conv2d, nn.Linear))  # the patch projection, in every stem


@pytest.mark.parametrize("patch", [4, 8, 16, 32])
def test_volo_stride_patterns_keep_the_token_grid(patch):
    for strides in volo_strides(patch):
        stem = _stem("volo", img=64, patch=patch, stem_strides=strides)
        assert stem(torch.randn(1, 3, 64, 64)).shape == (1, (64 // patch) ** 2, 32)


def _mask_then_stem_equals_stem_then_mask(stem, img=64, patch=16):
    x = torch.randn(1, 3, img, img)
    grid = img // patch
    masked = torch.rand(grid * grid) < 0.5  # (N,) True = masked patch
    pixel_mask = masked.view(grid, grid).repeat_interleave(patch, 0).repeat_interleave(patch, 1)
    with torch.no_grad():
        a = stem(x.masked_fill(pixel_mask, 0.0))  # mask the image (blank patches), then the stem
        mask_token = stem(torch.zeros_like(x))[:, :1]  # the stem's token of a blank patch
        b = torch.where(masked[None, :, None], mask_token, stem(x))  # stem, then mask the tokens
    return torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("kind", ["hmlp_bn", "hmlp_ln", "linear", "dpn"])
def test_patchwise_stems_commute_with_masking(kind):
    # Algorithm 1: every layer has kernel == stride inside a 16x16 patch, and BN in eval mode is a
    # fixed per-channel affine map, so no layer mixes patches: masking commutes with the stem.
    assert _mask_then_stem_equals_stem_then_mask(_stem(kind))


@pytest.mark.parametrize("kind", ["levit_bn", "levit_ln", "volo"])
def test_conv_stems_do_not_commute_with_masking(kind):
    # 3x3 / 7x7 kernels overlap patch borders: a masked patch leaks into its neighbours' tokens.
    assert not _mask_then_stem_equals_stem_then_mask(_stem(kind))


def test_hmlp_with_train_mode_batchnorm_does_not_commute():
    # In train mode BN normalises with statistics of the whole batch (all patches, masked ones
    # included), so masking a patch changes every token: use eval-mode BN or LN for the property.
    assert not _mask_then_stem_equals_stem_then_mask(_stem("hmlp_bn").train())


def test_hmlp_matches_algorithm_1():
    stem = make_stem("hmlp_bn", img_size=224, patch_size=16, embed_dim=768)
    convs = [m for m in stem.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [
        (3, 192, 4, 4), (192, 192, 2, 2), (192, 768, 2, 2)]
    assert sum(isinstance(m, nn.BatchNorm2d) for m in stem.modules()) == 3
    assert sum(isinstance(m, nn.GELU) for m in stem.modules()) == 2


def test_dpn_first_layernorm_sees_raw_pixel_patches():
    stem = _stem("dpn", img=32, patch=8)
    seen = []
    stem.pixel_norm.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    x = torch.randn(2, 3, 32, 32)
    stem(x)
    patches = rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=8, p2=8)
    assert torch.equal(seen[0], patches)
    # patch k, pixel (i, j), channel c sits at i*8*3 + j*3 + c (the paper's "hp wp c" order)
    assert seen[0][1, 5, (2 * 8 + 7) * 3 + 1] == x[1, 1, 8 + 2, 8 * 1 + 7]


def _norm_params(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("variant", DPN_VARIANTS)
def test_dpn_variants(variant):
    stem = _stem("dpn", img=32, patch=8, dpn_variant=variant)
    pre, post = stem.pixel_norm, stem.norm
    has_pre = variant not in ("post", "post_posemb")
    has_post = variant not in ("pre", "post_posemb")
    assert isinstance(pre, nn.Identity) != has_pre and isinstance(post, nn.Identity) != has_post
    n_pre = {"rmsnorm": 192, "no_learnable": 0}.get(variant, 2 * 192) if has_pre else 0
    assert _norm_params(pre) == n_pre  # RMSNorm: scale only; "no learnable": no parameters
    x = torch.randn(4, 5, 192) * 3 + 1
    if variant == "only_learnable":  # scale and shift without standardisation
        assert torch.allclose(pre(x), x * pre.weight + pre.bias)
    if variant in ("dual", "pre", "no_learnable"):  # standardised per patch
        assert torch.allclose(pre(x).mean(-1), torch.zeros(4, 5), atol=1e-4)


def test_dpn_post_posemb_normalises_after_position_embedding():
    m = create_model("vit_Ti", img_size=32, patch_size=8, num_classes=3, depth_mult=0.25,
                     stem="dpn", dpn_variant="post_posemb")
    assert isinstance(m.patch_embed.pixel_norm, nn.Identity) and isinstance(m.patch_embed.norm, nn.Identity)
    assert isinstance(m.norm_pre, nn.LayerNorm)  # timm applies norm_pre to patches + pos_embed
    seen = []
    m.norm_pre.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    x = torch.randn(1, 3, 32, 32)
    m(x)
    expected = torch.cat([m.cls_token, m.patch_embed(x)], 1) + m.pos_embed
    assert torch.allclose(seen[0], expected)


# Scaled ReLU Tables 2 and 3: the conv stem and its components.
@pytest.mark.parametrize("label", SCALED_RELU_STEMS)
def test_scaled_relu_table2_labels(label):
    model = create_model("vit_S", img_size=64, num_classes=10, width_mult=0.25, depth_mult=0.25,
                         **SCALED_RELU_STEMS[label])
    stem = model.patch_embed
    kinds = [type(m) for m in stem.modules()]
    want = {part[1:]: int(part[0]) for part in label.split("+")}  # "3BN" -> {"BN": 3}
    assert kinds.count(nn.Conv2d) == want.get("Conv", 0) + want["Proj"]
    assert kinds.count(nn.BatchNorm2d) == want.get("BN", 0)
    assert kinds.count(nn.ReLU) == want.get("ReLU", 0)
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 10)


@pytest.mark.parametrize("strides,kernels,pads", [
    ((2, 1, 1, 8), (7, 3, 3, 8), (3, 1, 1, 0)),  # VOLO's stem, Scaled ReLU default
    ((2, 2, 2, 2), (7, 3, 3, 8), (3, 1, 1, 3)),  # Table 3: same kernels, strides spread evenly
])
def test_scaled_relu_table3_strides(strides, kernels, pads):
    stem = _stem("volo", img=224, patch=16, dim=384, stem_strides=strides)
    convs = [m for m in stem.modules() if isinstance(m, nn.Conv2d)]
    assert [c.stride[0] for c in convs] == list(strides)
    assert [c.kernel_size[0] for c in convs] == list(kernels)
    assert [c.padding[0] for c in convs] == list(pads)
    assert [c.out_channels for c in convs] == [64, 64, 64, 384]  # hidden width 64
    assert stem(torch.randn(1, 3, 224, 224)).shape == (1, 196, 384)


def test_scaled_relu_conv_stem_adds_one_million_parameters_to_deit_s():
    # "the parameters of DeiT-Small increase from 22M to 23M" (printed to the million)
    with torch.device("meta"):
        base, conv = create_model("vit_S"), create_model("vit_S", stem="volo")
    assert round(count_params(base) / 1e6) == 22 and round(count_params(conv) / 1e6) == 23


@pytest.mark.parametrize("option,value,listed", [
    ("stem", "conv", "hmlp_bn"),
    ("dpn_variant", "both", "post_posemb"),
    ("stem_act", "tanh", "gelu, relu, silu, hardswish, none"),
    ("stem_strides", (4, 1, 1, 4), "(2, 1, 1, 8), (2, 2, 2, 2)"),
    ("stem_convs", 2, "3, 0"),
])
def test_bad_stem_options_list_the_choices(option, value, listed):
    with pytest.raises(ValueError, match="valid choices") as err:
        create_model("vit_Ti", img_size=32, **{option: value})
    assert listed in str(err.value)


def test_describe_lists_a_stems_layers_in_the_order_they_run():
    from vitmlp.models.stems import describe
    assert describe(_stem("hmlp_bn", 32, 4, 48)) == \
        "conv 1×1/1 3→12 → BN → GELU → conv 2×2/2 12→12 → BN → GELU → conv 2×2/2 12→48 → BN"
    assert describe(_stem("levit_ln", 32, 4, 48)) == "conv 3×3/2 3→24 → LN → GELU → conv 3×3/2 24→48 → LN"
    assert describe(_stem("linear", 32, 4, 48)) == "conv 4×4/4 3→48"
    assert describe(_stem("linear_bn_gelu", 32, 4, 48)) == "conv 4×4/4 3→48 → BN → GELU"
    assert describe(_stem("dpn", 32, 4, 48)) == "LN → dense 48→48 → LN"


def test_the_conv_stem_keeps_the_papers_share_of_multiply_adds_at_a_reduced_width():
    """64 channels on a ViT 1/8 as wide add +162 % multiply-adds (the paper's stem: +28 %): the
    reduced conv stem takes the width that keeps the paper's share, a patchify row no option."""
    from vitmlp.experiment import PAPER_STEM_WIDTH, conv_stem_width, paper_arm
    width, here, paper = conv_stem_width("cpu")
    assert width == 24 and abs(here - paper) < 0.02 and 0.27 < paper < 0.29
    assert conv_stem_width("paper")[0] == PAPER_STEM_WIDTH
    conv = paper_arm("cpu", "conv", SCALED_RELU_STEMS["3Conv+3BN+3ReLU+1Proj"], 5e-4, 5)
    patchify = paper_arm("cpu", "patchify", SCALED_RELU_STEMS["1Proj"], 5e-4, 5)
    assert conv.model_options["stem_width"] == 24 and "stem_width" not in patchify.model_options
    with pytest.raises(ValueError, match="stem_width must be a positive int, got 0"):
        create_model("vit_S", stem="volo", stem_width=0, img_size=32, patch_size=4)
