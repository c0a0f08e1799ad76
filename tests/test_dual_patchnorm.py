"""Dual PatchNorm: the book's stem is the paper's Flax listing (the listing written out here line by
line in einops + torch, on the book's weights), and the probes of Figures 2 and 3 on cases whose
answer is known by hand."""
import math
from pathlib import Path

import einops
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from vitmlp.analysis import book_snapshots, dense_projections, grad_norms, pixel_norm_scales
from vitmlp.measure import count_params
from vitmlp.models import create_model
from vitmlp.models.stems import make_stem

# --- the paper's listing, literally ----------------------------------------------------------------
FLAX_LN_EPS = 1e-6  # flax.linen.LayerNorm's default epsilon; the listing sets none


def flax_layer_norm(x, p):  # Eq. 1-2 over the last axis (flax's reduction_axes=-1), biased variance
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + FLAX_LN_EPS) * p["scale"] + p["bias"]


def flax_dense(x, p):  # flax.linen.Dense: x @ kernel + bias, kernel (in, out)
    return x @ p["kernel"] + p["bias"]


def listing(x, params, patch_size):
    """The paper's six lines; x: images (b, h, w, c), channels last as in Flax."""
    hp, wp = patch_size[0], patch_size[1]
    x = einops.rearrange(
        x, "b (ht hp) (wt wp) c -> b (ht wt) (hp wp c)", hp=hp, wp=wp)
    x = flax_layer_norm(x, params["ln0"])   # nn.LayerNorm(name="ln0")(x)
    x = flax_dense(x, params["dense"])      # nn.Dense(output_features, name="dense")(x)
    x = flax_layer_norm(x, params["ln1"])   # nn.LayerNorm(name="ln1")(x)
    return x


def listing_shapes(patch, chans, width):
    """The parameters Flax creates for the listing: LayerNorm scale/bias over the last axis, a Dense kernel (in, out)."""
    d = patch * patch * chans
    return {"ln0": {"scale": (d,), "bias": (d,)}, "dense": {"kernel": (d, width), "bias": (width,)},
            "ln1": {"scale": (width,), "bias": (width,)}}


def copy_to_listing(stem, dtype):
    """The book's weights copied into tensors of the listing's shapes (a mismatch raises)."""
    p, chans = stem.patch_size[0], stem.pixel_norm.weight.numel() // stem.patch_size[0] ** 2
    params = {k: {n: torch.zeros(s, dtype=dtype) for n, s in v.items()}
              for k, v in listing_shapes(p, chans, stem.proj.out_features).items()}
    with torch.no_grad():
        for name, norm in (("ln0", stem.pixel_norm), ("ln1", stem.norm)):
            put(params[name]["scale"], norm.weight)
            put(params[name]["bias"], norm.bias)
        put(params["dense"]["kernel"], stem.proj.weight.T)  # torch (out, in) -> flax (in, out)
        put(params["dense"]["bias"], stem.proj.bias)
    return params


def put(dst, src):  # copy_ would broadcast, and B/16 has a square kernel (768 x 768): compare shapes
    assert dst.shape == src.shape, (dst.shape, src.shape)
    dst.copy_(src)


def perturb(module, seed=0):
    """Random weights everywhere, so that LN scale 1 / bias 0 cannot hide a swapped order."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module.eval()


# the paper's architectures (Table 1: Ti/16, S/32, B/32, S/16, B/16; Figure 2: L/16) and a tiny one
CONFIGS = {"Ti/16": (192, 16, 224), "S/32": (384, 32, 224), "B/32": (768, 32, 224), "S/16": (384, 16, 224),
           "B/16": (768, 16, 224), "L/16": (1024, 16, 224), "tiny": (16, 4, 16)}


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-10), (torch.float32, 1e-4)])
@pytest.mark.parametrize("config", CONFIGS)
def test_book_stem_computes_the_listing(config, dtype, atol):
    width, patch, img = CONFIGS[config]
    stem = perturb(make_stem("dpn", img_size=img, patch_size=patch, in_chans=3, embed_dim=width).to(dtype))
    x = 2 * torch.rand(2, 3, img, img, generator=torch.Generator().manual_seed(1), dtype=dtype) - 0.5
    with torch.no_grad():
        ours = stem(x)
        ref = listing(x.permute(0, 2, 3, 1), copy_to_listing(stem, dtype), (patch, patch))
    assert ours.shape == ref.shape == (2, (img // patch) ** 2, width)
    assert (ours - ref).abs().max().item() < atol
    # the conv's (c hp wp) feature order on the same weights is another function: the check can fail
    params = copy_to_listing(stem, dtype)
    wrong = einops.rearrange(x.permute(0, 2, 3, 1), "b (ht hp) (wt wp) c -> b (ht wt) (c hp wp)", hp=patch, wp=patch)
    wrong = flax_layer_norm(flax_dense(flax_layer_norm(wrong, params["ln0"]), params["dense"]), params["ln1"])
    assert (ours - wrong).abs().max().item() > 1e-2


def test_pixel_features_are_in_the_listings_hp_wp_c_order():
    p, img = 4, 8
    stem = make_stem("dpn", img_size=img, patch_size=p, in_chans=3, embed_dim=8)
    seen = []
    stem.pixel_norm.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    c, i, j = torch.meshgrid(torch.arange(3), torch.arange(img), torch.arange(img), indexing="ij")
    code = (1000 * c + 10 * i + j).float()[None]                    # (1, 3, 8, 8): each value says where it is
    stem(code)
    nhwc = einops.rearrange(code, "b c h w -> b h w c")
    assert torch.equal(seen[0], einops.rearrange(nhwc, "b (ht hp) (wt wp) c -> b (ht wt) (hp wp c)", hp=p, wp=p))
    # token 3 = patch (row 1, col 1); feature (hp * p + wp) * 3 + c = channel c, pixel (4 + hp, 4 + wp)
    assert seen[0][0, 3, (2 * p + 1) * 3 + 2] == 1000 * 2 + 10 * (4 + 2) + (4 + 1)


@pytest.mark.parametrize("name, options", [("vit_Ti", {}), ("vit_Ti", dict(img_size=16, patch_size=4,
                                                                             width_mult=0.125, depth_mult=0.25))])
def test_second_layernorm_comes_before_position_embedding_and_class_token(name, options):
    """big_vision's ViT adds the position embedding to the stem's tokens, then prepends the class
    token; timm adds pos_embed after prepending it (pos_embed[:, 0] then belongs to the class token)."""
    torch.manual_seed(0)
    model = perturb(create_model(name, stem="dpn", num_classes=3, **options).double())
    img = options.get("img_size", 224)
    x = torch.randn(2, 3, img, img, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    seen = []
    model.blocks[0].register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    with torch.no_grad():
        model(x)
        p = model.patch_embed.patch_size
        tokens = listing(x.permute(0, 2, 3, 1), copy_to_listing(model.patch_embed, torch.float64), p)
        tokens = tokens + model.pos_embed[:, 1:]                    # x + posemb, then the class token
        cls = (model.cls_token + model.pos_embed[:, :1]).expand(2, -1, -1)
        assert (seen[0] - torch.cat([cls, tokens], 1)).abs().max().item() < 1e-10
        # the alternative (LN after the position embedding, Table 4's "Post PosEmb") is another function
        e = model.patch_embed.proj(model.patch_embed.pixel_norm(
            einops.rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=p[0], p2=p[1])))
        post = model.patch_embed.norm(torch.cat([model.cls_token.expand(2, -1, -1), e], 1) + model.pos_embed)
        assert (seen[0] - post).abs().max().item() > 1e-3


@pytest.mark.parametrize("config", [c for c in CONFIGS if c != "tiny"])
def test_parameter_counts_are_the_listings(config):
    width, patch, _ = CONFIGS[config]
    size = config.split("/")[0]
    shapes = listing_shapes(patch, 3, width)
    n = {k: sum(math.prod(s) for s in v.values()) for k, v in shapes.items()}
    with torch.device("meta"):
        dpn = create_model(f"vit_{size}", patch_size=patch, stem="dpn")
        base = create_model(f"vit_{size}", patch_size=patch)
    assert count_params(dpn.patch_embed) == sum(n.values())
    assert count_params(dpn) - count_params(base) == n["ln0"] + n["ln1"]   # the dense layer is the conv's


# --- Figure 3: gradient norm of every dense projection ---------------------------------------------
class OneLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed, self.blocks = nn.Module(), nn.Sequential()
        self.patch_embed.proj = nn.Linear(2, 2, bias=False)
        nn.init.zeros_(self.patch_embed.proj.weight)

    def forward(self, x):
        return self.patch_embed.proj(x)


def test_grad_norm_of_one_linear_layer_by_hand():
    # W = 0: softmax = (1/2, 1/2); dL/dlogits = p - onehot; dL/dW = (p - onehot) x^T
    # x = (1, 2), y = 0: [[-1/2, -1], [1/2, 1]] -> sqrt(2.5); x = (2, 0), y = 1: [[1, 0], [-1, 0]] -> sqrt(2)
    b1 = (torch.tensor([[1.0, 2.0]]), torch.tensor([0]))
    b2 = (torch.tensor([[2.0, 0.0]]), torch.tensor([1]))
    model = OneLayer()
    assert grad_norms(model, [b1]) == {"patch_embed.proj": pytest.approx(math.sqrt(2.5))}
    assert grad_norms(model, [b1, b2])["patch_embed.proj"] == pytest.approx((math.sqrt(2.5) + math.sqrt(2)) / 2)
    with pytest.raises(ValueError, match="at least one batch"):
        grad_norms(model, [])


@pytest.mark.parametrize("stem", ["dpn", "linear"])
def test_grad_norms_are_those_of_autograd_in_depth_order(stem):
    torch.manual_seed(0)
    model = create_model("vit_Ti", img_size=16, patch_size=4, width_mult=0.125, depth_mult=0.25, num_classes=5,
                         stem=stem).train()
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(2)]
    layers = dense_projections(model)
    depth = len(model.blocks)
    assert list(layers) == ["patch_embed.proj"] + [f"blocks.{b}.{n}" for b in range(depth)
                                                   for n in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")]
    norms = grad_norms(model, batches)
    assert model.training and all(p.grad is None for p in model.parameters())
    # reference 1: loss.backward() on each batch, the .grad of every weight
    ref = torch.zeros(len(layers), dtype=torch.float64)
    model.eval()
    for x, y in batches:
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        ref += torch.stack([m.weight.grad.double().norm() for m in layers.values()]) / len(batches)
    assert list(norms.values()) == pytest.approx(ref.tolist(), rel=1e-5)
    # reference 2: torch.autograd.grad on one layer's weight alone
    w = model.blocks[depth - 1].mlp.fc2.weight
    one = sum(torch.autograd.grad(F.cross_entropy(model(x), y), w)[0].norm().item() for x, y in batches) / 2
    assert norms[f"blocks.{depth - 1}.mlp.fc2"] == pytest.approx(one, rel=1e-5)
    assert all(v > 0 for v in norms.values())


# --- Figure 2: the first LayerNorm's scales in pixel space -----------------------------------------
def test_pixel_norm_scales_map_each_scale_back_to_its_channel_row_and_column():
    p = 4
    model = create_model("vit_Ti", img_size=8, patch_size=p, width_mult=0.125, depth_mult=0.25, num_classes=2,
                         stem="dpn")
    # the scale vector in the listing's (hp wp c) order: feature k = (row * p + col) * 3 + channel
    known = {"R": lambda r, c: 1.0 + (r == c), "G": lambda r, c: 2.0 + r, "B": lambda r, c: -c}  # diagonal, rows, cols
    scale = torch.tensor([known[ch](r, c) for r in range(p) for c in range(p) for ch in "RGB"])
    with torch.no_grad():
        model.patch_embed.pixel_norm.weight.copy_(scale)
    img = pixel_norm_scales(model)
    assert img.shape == (3, p, p)
    for k, ch in enumerate("RGB"):
        assert img[k].tolist() == [[known[ch](r, c) for c in range(p)] for r in range(p)]
    assert torch.equal(pixel_norm_scales(model.patch_embed), img)
    # and the same order as the stem's: an image holding that pattern is flattened into that vector
    seen = []
    model.patch_embed.pixel_norm.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    model(img[None].repeat(1, 1, 2, 2))                               # 2 x 2 patches, each the pattern
    assert all(torch.equal(seen[0][0, t], scale) for t in range(4))


# --- checkpoints along a run (Figure 3 at several points of training) -------------------------------
def test_book_snapshots_keep_every_epoch_and_leave_the_record_alone(tmp_path, monkeypatch, request):
    from vitmlp.profiles import run_config
    from vitmlp.records import config_hash, record_path, run_cache
    from vitmlp.train import load_weights
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "records"))
    monkeypatch.setenv("VITMLP_PROGRESS", "0")
    request.addfinalizer(lambda n=torch.get_num_threads(): torch.set_num_threads(n))
    torch.set_num_threads(1)  # the machine's cores are shared; also makes the re-run below bitwise equal
    cfg = run_config("smoke", "vit_Ti", model_options={"stem": "dpn"}, epochs=2, seed=0)
    snaps = book_snapshots(cfg)
    assert list(snaps) == [0, 1, 2]
    sd = {k: m.state_dict() for k, m in snaps.items()}
    same = lambda a, b: all(torch.equal(a[n], b[n]) for n in a)  # noqa: E731
    assert same(sd[2], load_weights(config_hash(cfg)).state_dict())
    assert not same(sd[0], sd[1]) and not same(sd[1], sd[2])
    torch.manual_seed(cfg.seed)
    assert same(sd[0], create_model(cfg.model, **cfg.model_options, num_classes=snaps[2].num_classes).state_dict())
    # a recorded run without its epoch files: trained again aside, the same weights, the record untouched
    rec = record_path(config_hash(cfg)).read_bytes()
    (run_cache(config_hash(cfg)) / "epoch1.pt").unlink()
    again = book_snapshots(cfg)
    assert same(again[1].state_dict(), sd[1]) and record_path(config_hash(cfg)).read_bytes() == rec


def test_book_snapshots_of_a_narrower_cpus_record_are_trained_aside_with_its_kernels(tmp_path, monkeypatch):
    """A run recorded with AVX2's kernels (a real AVX2 CPU, or a wider one capped, as here) whose epoch
    files are missing: trained aside under the record's ISA caps, its snapshots are the run's own."""
    import json
    import os
    import subprocess
    import sys
    from vitmlp.profiles import run_config
    from vitmlp.records import ISA_CAPS, config_hash, load_record, run_cache
    where = {"VITMLP_CACHE": str(tmp_path / "cache"), "VITMLP_RECORDS": str(tmp_path / "records"), "VITMLP_PROGRESS": "0",
             "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    for k, v in where.items():
        monkeypatch.setenv(k, v)
    cfg = run_config("smoke", "vit_Ti", model_options={"stem": "dpn"}, epochs=2, seed=0)
    child = ("import json, sys; from vitmlp.analysis import book_snapshots; from vitmlp.train import TrainConfig; "
             "book_snapshots(TrainConfig.from_dict(json.loads(sys.argv[1])))")
    r = subprocess.run([sys.executable, "-c", child, json.dumps(cfg.to_dict())], capture_output=True, text=True,
                       env={**os.environ, **ISA_CAPS["AVX2"]}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    h = config_hash(cfg)
    assert load_record(h)["machine"]["cpu_isa"] == "AVX2"
    first = torch.load(run_cache(h) / "epoch1.pt", weights_only=True)
    (run_cache(h) / "epoch1.pt").unlink()
    again = book_snapshots(cfg)[1].state_dict()   # this process has no caps: the retrain takes them
    assert all(torch.equal(first[n], again[n]) for n in first)


def test_dpn_projection_starts_like_the_patchify_conv_it_replaces():
    """Base vs DPN must differ in the LayerNorms only: the dense projection gets PyTorch's default
    init for its fan-in (uniform, bound 1/sqrt(fan_in)), as the patchify conv does; timm's init
    would give it N(0, 0.02), a 4x smaller start at 4-px patches."""
    torch.manual_seed(0)
    base = create_model("vit_B", img_size=32, patch_size=4, num_classes=10)
    torch.manual_seed(0)
    dpn = create_model("vit_B", img_size=32, patch_size=4, num_classes=10, stem="dpn")
    conv, dense = base.patch_embed.proj.weight, dpn.patch_embed.proj.weight
    fan_in = 4 * 4 * 3
    assert conv.flatten(1).shape == dense.shape == (768, fan_in)
    for w in (conv, dense):
        assert w.abs().max() <= 1 / math.sqrt(fan_in)
        assert abs(w.std().item() / (1 / math.sqrt(3 * fan_in)) - 1) < 0.02   # uniform's std, 37k draws
    assert dpn.patch_embed.proj.bias.abs().max() <= 1 / math.sqrt(fan_in) and dpn.patch_embed.proj.bias.abs().sum() > 0
