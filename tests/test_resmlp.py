"""ResMLP: parameter counts of Tables 1, 3, D.3; equality with timm and with Algorithm 1; options."""
import pytest
import timm
import torch
import torch.nn.functional as F

from vitmlp.measure import count_params as n_params
from vitmlp.models import create_model
from vitmlp.models.resmlp import channel_mlp_weights, cross_patch_weights
from vitmlp.models.resmlp_algorithm1 import from_book

TINY = dict(img_size=32, patch_size=4, width_mult=0.125, depth_mult=0.25, num_classes=10)  # d=48, 3 blocks


def randomize(model, seed=0):  # perturb every weight so no zero / one init can hide a wrong wiring
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


# (paper row, spec, options, paper's params x1e6); 1000-class head included, as in deit's counts
ROWS = [
    ("Table 1/3 ResMLP-S12", "S12", {}, 15.4),
    ("Table 1/3 ResMLP-S24", "S24", {}, 30.0),
    ("Table 1/3 ResMLP-B24", "B24", {}, 115.7),
    ("Table 3 Aff -> LayerNorm", "S12", dict(norm="layernorm"), 15.4),
    ("Table 3 avg -> class-MLP", "S12", dict(pooling="class_mlp"), 17.7),
    ("Table 3 linear -> none", "S12", dict(cross_patch="none"), 14.9),
    ("Table 3 linear -> MLP", "S12", dict(cross_patch="mlp"), 18.6),
    ("Table 3 linear -> conv 3x3", "S12", dict(cross_patch="conv3x3"), 30.8),
    ("Table 3 linear -> conv 3x3 depth-wise", "S12", dict(cross_patch="dwconv3x3"), 14.9),
    ("Table 3 linear -> conv 3x3 depth-separable", "S12", dict(cross_patch="dsconv3x3"), 16.7),
    ("Table 3 ResMLP-S12/14", "S12", dict(patch_size=14), 15.6),
    ("Table 3 ResMLP-S12/8", "S12", dict(patch_size=8), 22.1),
    ("Table 3 ResMLP-B24/8", "B24", dict(patch_size=8), 129.1),
    ("Table D.3 36 layers, average", "S36", {}, 44.7),
    ("Table D.3 24 layers, class-MLP", "S24", dict(pooling="class_mlp"), 32.4),
    ("Table D.3 36 layers, class-MLP", "S36", dict(pooling="class_mlp"), 47.1),
]


@pytest.mark.parametrize("row,spec,opts,paper", ROWS, ids=[r[0] for r in ROWS])
def test_param_counts_match_paper(row, spec, opts, paper):
    with torch.device("meta"):  # full size, no memory
        model = create_model(f"resmlp_{spec}", **opts)
    assert round(n_params(model) / 1e6, 1) == paper


@pytest.mark.parametrize("spec,opts,timm_name", [("S12", {}, "resmlp_12_224"), ("S24", {}, "resmlp_24_224"),
                                                 ("B24", dict(patch_size=8), "resmlp_big_24_224")])
def test_same_outputs_as_timm(spec, opts, timm_name):
    ours, theirs = create_model(f"resmlp_{spec}", **opts), randomize(timm.create_model(timm_name, pretrained=False))
    assert ours.state_dict().keys() == theirs.state_dict().keys()  # the name map is the identity
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.allclose(ours.eval()(x), theirs(x), atol=1e-5)


def aff(a, x):
    return a.alpha * x + a.beta


def mlp(m, x, act=F.gelu):
    return F.linear(act(F.linear(x, m.fc1.weight, m.fc1.bias)), m.fc2.weight, m.fc2.bias)


def test_block_and_model_follow_algorithm1():
    """Algorithm 1 (vitmlp.models.resmlp_algorithm1, the paper's listing) on the book's weights."""
    model = randomize(create_model("resmlp_S12", **TINY))
    ref = from_book(model)
    img, x = torch.randn(2, 3, 32, 32), torch.randn(2, 64, 48)
    with torch.no_grad():
        assert torch.allclose(model.blocks[0](x), ref.blocks[0](x), atol=1e-6)
        assert torch.allclose(model(img), ref(img), atol=1e-5)
        model = randomize(create_model("resmlp_S12", **TINY).double(), seed=1)  # float64 weights
        assert (model(img.double()) - from_book(model)(img.double())).abs().max() < 1e-12  # only rounding


def test_algorithm1_reference_is_not_the_book_model_in_disguise():
    model = randomize(create_model("resmlp_S12", **TINY))
    ref = from_book(model)
    assert not any(isinstance(m, torch.nn.Conv2d) for m in ref.modules())  # the stem is a linear on patches
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref.blocks[1].layerscale_2.mul_(2)  # the reference holds its own copy: a change must show
        assert not torch.allclose(model(img), ref(img), atol=1e-3)


@pytest.mark.parametrize("opts,message", [
    (dict(cross_patch="conv3x3"), "Affine, PatchConv, GELU"), (dict(act="relu"), "Affine, Linear, ReLU"),
    (dict(pooling="class_mlp"), "'pool.cls_token' has no counterpart"), (dict(mlp_ratio=2), "4\\*dim"),
])
def test_algorithm1_refuses_variants_it_does_not_describe(opts, message):
    with pytest.raises(ValueError, match=message):
        from_book(create_model("resmlp_S12", **TINY, **opts))


def test_class_mlp_updates_only_a_class_token_from_frozen_patches():
    model = randomize(create_model("resmlp_S12", pooling="class_mlp", **TINY))
    x = torch.randn(2, 64, 48)
    cls = model.pool.cls_token.expand(2, -1, -1)
    for layer in model.pool.layers:  # cls <- cls + ls1 * A_cls [cls; x] ; cls <- cls + ls2 * mlp(cls)
        u = aff(layer.norm1, torch.cat([cls, x], 1))
        cls = cls + layer.ls1 * F.linear(u.transpose(1, 2), layer.linear_tokens.weight,
                                         layer.linear_tokens.bias).transpose(1, 2)
        cls = cls + layer.ls2 * mlp(layer.mlp_channels, aff(layer.norm2, cls))
    with torch.no_grad():
        assert torch.allclose(model.pool(x), cls, atol=1e-6)
    assert len(model.pool.layers) == 2


def shuffle_patches(img, p, perm):  # (B, 3, H, W): move whole p x p patches
    B, C, H, W = img.shape
    t = img.unfold(2, p, p).unfold(3, p, p).reshape(B, C, -1, p, p)[:, :, perm]
    return t.reshape(B, C, H // p, W // p, p, p).permute(0, 1, 2, 4, 3, 5).reshape(B, C, H, W)


def test_without_cross_patch_layer_it_is_a_bag_of_patches():
    img, perm = torch.randn(2, 3, 32, 32), torch.randperm(64)
    with torch.no_grad():
        bag = randomize(create_model("resmlp_S12", cross_patch="none", **TINY))
        assert torch.allclose(bag(img), bag(shuffle_patches(img, 4, perm)), atol=1e-5)
        lin = randomize(create_model("resmlp_S12", **TINY))
        assert not torch.allclose(lin(img), lin(shuffle_patches(img, 4, perm)), atol=1e-3)


def test_conv_cross_patch_is_local_on_the_patch_grid():
    model = create_model("resmlp_S12", cross_patch="dsconv3x3", **TINY)
    conv = model.blocks[0].linear_tokens
    x = torch.randn(1, 48, 64)  # (B, d, N) on an 8x8 grid
    y = x.clone()
    y[:, :, 0] += 1.0  # change patch (0, 0)
    with torch.no_grad():
        changed = (conv(x) - conv(y)).abs().amax(1)[0].reshape(8, 8) > 0
    assert changed[:2, :2].all() and changed.sum() == 4


def test_default_layerscale_init_follows_deit():
    expect = {"S12": 0.1, "S24": 1e-5, "S36": 1e-6, "B24": 1e-6}
    for spec, value in expect.items():
        model = create_model(f"resmlp_{spec}", img_size=32, patch_size=16, width_mult=0.1, depth_mult=0.1)
        assert torch.allclose(model.blocks[0].ls1, torch.full_like(model.blocks[0].ls1, value))
    model = create_model("resmlp_S24", init_values=1e-4, **TINY)
    assert torch.allclose(model.blocks[-1].ls2, torch.full_like(model.blocks[-1].ls2, 1e-4))


def test_analysis_weights():
    model = create_model("resmlp_S12", **TINY)
    A = cross_patch_weights(model)
    assert len(A) == 3 and all(a.shape == (64, 64) for a in A)
    assert torch.equal(A[1], model.blocks[1].linear_tokens.weight)
    assert [(b.shape, c.shape) for b, c in channel_mlp_weights(model)] == [((192, 48), (48, 192))] * 3
    assert len(cross_patch_weights(timm.create_model("resmlp_12_224", pretrained=False))) == 12
    with pytest.raises(ValueError, match="cross_patch='linear'"):
        cross_patch_weights(create_model("resmlp_S12", cross_patch="conv3x3", **TINY))


@pytest.mark.parametrize("opts", [
    {}, dict(norm="layernorm"), dict(norm="batchnorm"), dict(norm="l2"), dict(pooling="class_mlp"),
    dict(cross_patch="none"), dict(cross_patch="mlp", patch_mlp_ratio=0.25), dict(cross_patch="conv3x3"),
    dict(cross_patch="dwconv3x3"), dict(act="relu"), dict(act="silu"), dict(act="hardswish"), dict(pos_embed=True),
    dict(norm="layernorm", pooling="class_mlp", cross_patch="mlp", pos_embed=True),  # Appendix A's baseline
])
def test_reduced_variants_train(opts):
    model = create_model("resmlp_S24", **TINY, **opts)
    out = model(torch.randn(4, 3, 32, 32))
    assert out.shape == (4, 10)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())  # no dead parameter


def test_reduced_profile_keeps_ratios_and_options_change_structure():
    model = create_model("resmlp_S24", **TINY)
    assert (model.embed_dim, len(model.blocks), model.stem.num_patches) == (48, 6, 64)
    assert model.blocks[0].mlp_channels.fc1.out_features == 4 * 48
    mlp = create_model("resmlp_S24", cross_patch="mlp", patch_mlp_ratio=0.5, **TINY)
    assert mlp.blocks[0].linear_tokens.fc1.weight.shape == (32, 64)  # linear N x eN, e = 0.5
    pos = create_model("resmlp_S24", pos_embed=True, **TINY)
    assert n_params(pos) - n_params(model) == 64 * 48
    relu = create_model("resmlp_S24", act="relu", **TINY)
    assert isinstance(relu.blocks[0].mlp_channels.act, torch.nn.ReLU)


@pytest.mark.parametrize("opts,message", [
    (dict(norm="rms"), "unknown norm 'rms'; valid choices: affine, layernorm, batchnorm, l2"),
    (dict(pooling="max"), "valid choices: avg, class_mlp"),
    (dict(cross_patch="attention"), "valid choices: linear, none, mlp, conv3x3"),
    (dict(act="tanh"), "valid choices: gelu, relu, silu, hardswish"),
    (dict(img_size=30, patch_size=4), "not a multiple of patch_size"),
    (dict(heads=6), "unknown option for resmlp 'heads'"),
])
def test_bad_options_are_refused(opts, message):
    with pytest.raises(ValueError, match=message):
        create_model("resmlp_S12", **opts)


@pytest.mark.parametrize("name,message", [("resmlp_L24", "valid choices: S, B"), ("resmlp_S", "expected <size><depth>")])
def test_bad_specs_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        create_model(name)
