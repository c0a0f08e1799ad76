"""MLP-Mixer: Table 1 specs and counts; equality with timm and Listing 1; Appendix A.1 and C."""
import pytest
import timm
import torch

from vitmlp.measure import count_params as n_params
from vitmlp.models import create_model
from vitmlp.models.mixer import (grow_token_mixing, listing1_layernorm as ln, listing1_mixer_block as listing1_block,
                                 listing1_mlp_block as mlp_block, listing1_mlp_mixer as listing1_model,
                                 stem_filters, token_mixing_weights)

TINY = dict(img_size=16, patch_size=4, width_mult=1 / 16, depth_mult=0.25, num_classes=10)  # S16: C=32, 2 layers


def randomize(model, seed=0):  # perturb every weight: timm's zero head would make any outputs agree
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


# Table 1: layers, patch, hidden C, sequence length S, D_C, D_S, params (M) without the head, as printed
TABLE1 = {"S32": (8, 32, 512, 49, 2048, 256, 19), "S16": (8, 16, 512, 196, 2048, 256, 18),
          "B32": (12, 32, 768, 49, 3072, 384, 60), "B16": (12, 16, 768, 196, 3072, 384, 59),
          "L32": (24, 32, 1024, 49, 4096, 512, 206), "L16": (24, 16, 1024, 196, 4096, 512, 207),
          "H14": (32, 14, 1280, 256, 5120, 640, 431)}


@pytest.mark.parametrize("spec", TABLE1)
def test_table1_specs_and_param_counts(spec):
    layers, patch, C, S, D_C, D_S, paper = TABLE1[spec]
    with torch.device("meta"):
        model = create_model(f"mixer_{spec}")
    blk = model.blocks[0]
    assert (len(model.blocks), model.stem.patch_size, model.embed_dim, model.stem.num_patches) == \
           (layers, (patch, patch), C, S)
    assert (blk.mlp_channels.fc1.out_features, blk.mlp_tokens.fc1.out_features) == (D_C, D_S)
    assert round(n_params(model, exclude=("head.",)) / 1e6) == paper


def test_l16_count_with_and_without_head():
    with torch.device("meta"):
        model = create_model("mixer_L16")
    assert round(n_params(model) / 1e6, 1) == 208.2  # 1000-class head included
    assert round(n_params(model, exclude=("head.",)) / 1e6, 1) == 207.2


@pytest.mark.parametrize("spec,timm_name", [("S32", "mixer_s32_224"), ("B16", "mixer_b16_224")])
def test_same_outputs_as_timm(spec, timm_name):
    ours, theirs = create_model(f"mixer_{spec}"), randomize(timm.create_model(timm_name, pretrained=False))
    assert ours.state_dict().keys() == theirs.state_dict().keys()  # the name map is the identity
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.allclose(ours.eval()(x), theirs(x), atol=1e-5)


def test_block_and_model_follow_listing1():
    model = create_model("mixer_S16", **TINY)
    assert model.head.weight.abs().sum() == 0  # Listing 1: head kernel_init zeros
    model = randomize(model)
    x, img = torch.randn(2, 16, 32), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(model.blocks[0](x), listing1_block(model.blocks[0], x), atol=1e-6)
        assert torch.allclose(model(img), listing1_model(model, img), atol=1e-5)
        # Flax's default nn.gelu is the tanh form: close to, but measurably not, torch's exact GELU
        assert 1e-6 < (model(img) - listing1_model(model, img, gelu="tanh")).abs().max() < 1e-2
    with pytest.raises(ValueError, match="valid choices: none, tanh"):
        listing1_model(model, img, gelu="erf")


def crops(img, K):  # the K x K spatial parts of an image, in raster order
    B, C, H, W = img.shape
    return [img[:, :, i * H // K:(i + 1) * H // K, j * W // K:(j + 1) * W // K] for i in range(K) for j in range(K)]


@pytest.mark.parametrize("K", [2, 3])
def test_grown_token_mixing_processes_each_part_like_the_original(K):
    model = randomize(create_model("mixer_S16", **TINY))  # 4x4 patch grid, D_S = 16
    big = grow_token_mixing(model, K)
    old, new = model.blocks[0].mlp_tokens, big.blocks[0].mlp_tokens
    assert new.fc1.weight.shape == (K * K * 16, K * K * 16) and model.stem.img_size == (16, 16)
    # token-mixing MLP alone: tokens in raster order over the (4K x 4K) grid, one row per channel
    x = torch.randn(3, 32, 4 * K, 4 * K)
    with torch.no_grad():
        y = new(x.flatten(2)).reshape(3, 32, 4 * K, 4 * K)
        for i in range(K):
            for j in range(K):
                part = x[:, :, 4 * i:4 * i + 4, 4 * j:4 * j + 4].flatten(2)
                assert torch.allclose(y[:, :, 4 * i:4 * i + 4, 4 * j:4 * j + 4].flatten(2), old(part), atol=1e-5)
        # the whole grown model on a K-times larger image = the original model averaged over its K^2 crops
        img = torch.randn(2, 3, 16 * K, 16 * K)
        assert torch.allclose(big(img), torch.stack([model(c) for c in crops(img, K)]).mean(0), atol=1e-5)


def test_grow_refuses_grouped_or_untied_token_mixing():
    for opts in (dict(groups=2), dict(untied=True)):
        with pytest.raises(ValueError, match="tied, ungrouped"):
            grow_token_mixing(create_model("mixer_S16", **TINY, **opts), 2)


def test_untied_token_mixing_is_one_mlp_per_channel():
    tied, untied = randomize(create_model("mixer_S16", **TINY)), create_model("mixer_S16", untied=True, **TINY)
    C, S, D_S = 32, 16, 16
    assert n_params(untied) - n_params(tied) == 2 * (C - 1) * (2 * S * D_S + S + D_S)
    state = tied.state_dict()
    for i in range(len(tied.blocks)):  # every channel gets a copy of the tied MLP: same function
        m = f"blocks.{i}.mlp_tokens."
        for new, old in (("w1", "fc1.weight"), ("b1", "fc1.bias"), ("w2", "fc2.weight"), ("b2", "fc2.bias")):
            w = state.pop(m + old)
            state[m + new] = w.expand(C, *w.shape).clone()
    untied.load_state_dict(state)
    img = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(untied.eval()(img), tied(img), atol=1e-5)
        untied.blocks[0].mlp_tokens.w1[5] += 1.0  # change channel 5's own MLP: only channel 5 moves
        y = ln(tied.blocks[0].norm1, torch.randn(2, 16, 32)).transpose(1, 2)  # (B, C, S)
        moved = (untied.blocks[0].mlp_tokens(y) - tied.blocks[0].mlp_tokens(y)).abs().amax(dim=(0, 2)) > 1e-4
    assert moved.nonzero().flatten().tolist() == [5]
    grouped = create_model("mixer_S16", untied=True, groups=4, **TINY)  # C/G = 8 MLPs of S*G = 64 inputs
    assert n_params(grouped) - n_params(tied) == 2 * (8 * (2 * 64 * D_S + 64 + D_S) - (2 * S * D_S + S + D_S))


def test_grouped_channels_concatenate_neighbouring_columns():
    G = 4
    model = randomize(create_model("mixer_S16", groups=G, **TINY))
    blk = model.blocks[0]
    assert blk.mlp_tokens.fc1.in_features == G * 16
    x = torch.randn(2, 16, 32)  # (B, S, C)
    X = ln(blk.norm1, x)
    cols = [torch.cat([X[:, :, k * G + g] for g in range(G)], dim=1) for k in range(32 // G)]  # (B, S*G) each
    out = [mlp_block(blk.mlp_tokens, c).reshape(2, G, 16) for c in cols]  # back to G columns of length S
    u = x + torch.cat(out, dim=1).transpose(1, 2)
    with torch.no_grad():
        assert torch.allclose(blk(x), u + mlp_block(blk.mlp_channels, ln(blk.norm2, u)), atol=1e-5)


def test_stochastic_depth_rises_linearly_per_mlp():
    model = create_model("mixer_S16", drop_path_rate=0.1, **TINY)  # 2 layers = 4 MLPs
    rates = [getattr(getattr(b, n), "drop_prob", 0.0) for b in model.blocks for n in ("drop_path", "drop_path2")]
    assert rates == pytest.approx([0.0, 0.1 / 3, 0.2 / 3, 0.1])


def test_analysis_weights_and_reduced_forward():
    model = create_model("mixer_S16", **TINY)
    W = token_mixing_weights(model)
    assert len(W) == 2 and W[0].shape == (16, 16) and W[0].reshape(-1, *model.stem.grid_size).shape == (16, 4, 4)
    assert stem_filters(model).shape == (32, 3, 4, 4)
    model = create_model("mixer_B16", img_size=32, patch_size=4, width_mult=0.25, depth_mult=0.25, num_classes=10)
    assert (model.embed_dim, len(model.blocks), model.stem.num_patches) == (192, 3, 64)
    assert model.blocks[0].mlp_tokens.fc1.out_features == 96 and model.blocks[0].mlp_channels.fc1.out_features == 768
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)


@pytest.mark.parametrize("name,opts,message", [
    ("mixer_X16", {}, "valid choices: S, B, L, H"),
    ("mixer_B", {}, "expected <size><patch>"),
    ("mixer_S16", dict(img_size=30), "not a multiple of patch_size"),
    ("mixer_S16", dict(groups=3), "must divide the hidden size"),
    ("mixer_S16", dict(stem="conv"), "unknown option for mixer 'stem'"),
])
def test_bad_options_are_refused(name, opts, message):
    with pytest.raises(ValueError, match=message):
        create_model(name, **opts)


# --- Figure 4: a patch+pixel shuffle is a permutation of Mixer's weights ------------------------
def test_permuted_twin_computes_on_shuffled_images_what_the_model_computes_on_the_originals():
    from vitmlp.data import global_pixel_shuffle, patch_pixel_shuffle
    from vitmlp.models.mixer import permuted_twin
    model = randomize(create_model("mixer_S16", **TINY))
    s = patch_pixel_shuffle(16, 4, seed=3)
    twin = permuted_twin(model, s)
    img = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        assert torch.allclose(twin(s(img)), model(img), atol=1e-5)
        assert not torch.allclose(model(s(img)), model(img), atol=1e-3)      # the plain model is not invariant
    assert not torch.equal(twin.stem.proj.weight, model.stem.proj.weight)   # a different point in weight space
    with pytest.raises(ValueError, match="not a patch\\+pixel shuffle"):
        permuted_twin(model, global_pixel_shuffle(16, seed=0))
    with pytest.raises(ValueError, match="not a patch\\+pixel shuffle"):
        permuted_twin(model, patch_pixel_shuffle(16, 2, seed=0))               # 2-px patches are not the model's
    with pytest.raises(ValueError, match="tied, ungrouped"):
        permuted_twin(create_model("mixer_S16", groups=2, **TINY), s)


def test_init_for_shuffle_is_the_twin_of_the_same_seeds_init():
    from vitmlp.data import patch_pixel_shuffle
    from vitmlp.models.mixer import permuted_twin
    torch.manual_seed(7)
    plain = create_model("mixer_S16", **TINY)
    torch.manual_seed(7)
    twin = create_model("mixer_S16", init_for_shuffle="patch", **TINY)
    expected = permuted_twin(plain, patch_pixel_shuffle(16, 4)).state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in twin.state_dict().items())
    with pytest.raises(ValueError, match="valid choices: none, patch"):
        create_model("mixer_S16", init_for_shuffle="global", **TINY)


def test_training_on_patch_shuffled_images_follows_the_plain_run(tmp_path, monkeypatch):
    """The trainer's pixel_shuffle="patch" run of the twin init has the plain run's curves."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from ddp_worker import tiny_data
    from vitmlp.train import TrainConfig, train
    monkeypatch.setenv("VITMLP_PROGRESS", "0")
    base = dict(model="mixer_S16", model_options=dict(TINY, num_classes=4), img_size=16, batch_size=32, epochs=2,
                augment="crop_flip", lr=3e-3)
    data = tiny_data(n_train=128, n_val=64, img_size=16)
    recs = [train(TrainConfig(**cfg), data=data, records=tmp_path, cache=tmp_path) for cfg in (
        base, dict(base, pixel_shuffle="patch", model_options=dict(base["model_options"], init_for_shuffle="patch")),
        dict(base, pixel_shuffle="patch"))]
    (plain, twin, fresh) = (r["curves"] for r in recs)
    assert max(abs(a - b) for a, b in zip(plain["train_loss"], twin["train_loss"])) < 1e-4
    assert max(abs(a - b) for a, b in zip(plain["val_loss"], twin["val_loss"])) < 1e-4
    assert abs(plain["val_loss"][-1] - fresh["val_loss"][-1]) > 1e-3   # same seed, unpermuted init: another run


# --- Appendix C as a run: init_from a smaller-image Mixer grows or re-initialises token mixing -----
def test_adapt_state_dict_grows_token_mixing_or_keeps_it_fresh():
    small = randomize(create_model("mixer_S16", **TINY))
    sd = small.state_dict()
    torch.manual_seed(0)
    big = create_model("mixer_S16", **dict(TINY, img_size=32), token_mixing_growth=2)
    assert big.blocks[0].mlp_tokens.fc1.weight.shape == (4 * 16, 4 * 16)
    big.load_state_dict(big.adapt_state_dict(sd))
    ref = grow_token_mixing(small, 2)
    img = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(big.eval()(img), ref(img), atol=1e-6)
    torch.manual_seed(0)
    fresh = create_model("mixer_S16", **dict(TINY, img_size=32), token_mixing_growth=2, token_mixing_init="fresh")
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    adapted = fresh.adapt_state_dict(sd)
    assert not any(".mlp_tokens." in k for k in adapted) and "stem.proj.weight" in adapted
    fresh.load_state_dict(adapted, strict=False)
    assert torch.equal(fresh.blocks[1].mlp_tokens.fc2.weight, before["blocks.1.mlp_tokens.fc2.weight"])
    assert torch.equal(fresh.stem.proj.weight, small.stem.proj.weight)
    plain = create_model("mixer_S16", **dict(TINY, img_size=32))    # D_S not grown: K^2 S tokens, D_S units
    with pytest.raises(ValueError, match="token_mixing_growth=K"):
        plain.adapt_state_dict(sd)
    with pytest.raises(ValueError, match="dividing the patch grid side 4"):
        create_model("mixer_S16", token_mixing_growth=3, **TINY)
    with pytest.raises(ValueError, match="valid choices: grow, fresh"):
        create_model("mixer_S16", token_mixing_init="zero", **TINY)
