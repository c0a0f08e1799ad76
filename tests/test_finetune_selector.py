"""Fine-tuning selectors of Three things Sec. 4 (full / attn / ffn): the exact parameter names and
counts each mode trains, on sequential and parallel ViTs, through the trainer's ``trainable`` rule;
deit's ``--attn-only`` name rule and where it would miss a parallel branch; the cost of a step."""
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from timm.layers import Attention, Mlp
from timm.models.vision_transformer import VisionTransformer

from vitmlp.measure import train_step_cost
from vitmlp.models import create_model
from vitmlp.models.vit import FINETUNE_MODES, trainable
from vitmlp.train import train

sys.path.insert(0, str(Path(__file__).parent))
from ddp_worker import tiny_data  # noqa: E402

torch.set_num_threads(1)


def _meta(name, **kw):
    with torch.device("meta"):  # names and counts need no memory
        return create_model(name, **kw)


def selected(model, patterns):
    """What the trainer trains: names containing one of ``TrainConfig.trainable`` (None: all)."""
    return {n for n, _ in model.named_parameters() if patterns is None or any(f in n for f in patterns)}


def deit_attn_only(model):
    """facebookresearch/deit main.py, ``--attn-only``, transcribed: ``.attn.`` in the name, then the
    head and pos_embed on; the patch embedding off (the class token, norms, LayerScale stay off)."""
    on = {n for n, _ in model.named_parameters() if ".attn." in n}
    return on | {"head.weight", "head.bias", "pos_embed"}


def linear(prefix):
    return {f"{prefix}.{w}" for w in ("weight", "bias")}


# (spec, options): sequential and parallel, with and without LayerScale, 224 and 384 px
MODELS = [("S", {}), ("B", {"img_size": 384, "layerscale": 1e-5}), ("S18x2", {}), ("B18x2", {"layerscale": 1e-5}),
          ("Ti2x3", {})]


def dims(spec, options):
    """(width D, layers L, branches k, tokens N, classes C, LayerScale) from the spec and Table 1's widths."""
    size, layers, branches = re.fullmatch(r"(Ti|S|B|L)(\d+)?(?:x(\d+))?", spec).groups()
    width = {"Ti": 192, "S": 384, "B": 768, "L": 1024}[size]
    return (width, int(layers or (24 if size == "L" else 12)), int(branches or 1),
            (options.get("img_size", 224) // 16) ** 2 + 1, 1000, "layerscale" in options)


@pytest.mark.parametrize("spec, options", MODELS, ids=[m for m, _ in MODELS])
def test_each_mode_trains_exactly_these_names(spec, options):
    model = _meta(f"vit_{spec}", **options)
    D, L, k, N, C, ls = dims(spec, options)
    par = k > 1
    blocks = [f"blocks.{i}" + (f".attns.{j}" if par else "") for i in range(L) for j in range(k)]
    ffns = [f"blocks.{i}" + (f".ffns.{j}" if par else "") for i in range(L) for j in range(k)]
    always = linear("head") | {"pos_embed"}
    attn = {n for b in blocks for lin in ("qkv", "proj") for n in linear(f"{b}.attn.{lin}")}
    ffn = {n for b in ffns for lin in ("fc1", "fc2") for n in linear(f"{b}.mlp.{lin}")}
    assert selected(model, trainable(model, "attn")) == attn | always
    assert selected(model, trainable(model, "ffn")) == ffn | always
    assert selected(model, trainable(model, "full")) == {n for n, _ in model.named_parameters()}
    # deit's literal rule picks the same set on timm's names, sequential or parallel
    assert selected(model, trainable(model, "attn")) == deit_attn_only(model)
    frozen = {n for n, _ in model.named_parameters()} - attn - always
    assert {"cls_token", "patch_embed.proj.weight", "norm.weight"} <= frozen
    assert all(("norm" in n or ".ls" in n or ".mlp." in n or n in ("cls_token",) or n.startswith("patch_embed."))
               for n in frozen)
    assert any(".ls" in n for n in frozen) == ls


@pytest.mark.parametrize("spec, options", MODELS, ids=[m for m, _ in MODELS])
def test_trainable_counts_match_a_hand_count_from_the_dims(spec, options):
    model = _meta(f"vit_{spec}", **options)
    D, L, k, N, C, ls = dims(spec, options)
    attn, ffn = 4 * D * D + 4 * D, 8 * D * D + 5 * D          # qkv + proj; fc1 (D->4D) + fc2 (4D->D)
    always = D * C + C + N * D                                # head, pos_embed
    norms = 2 * 2 * D + (2 * D if ls else 0)                  # two LayerNorms (+ two LayerScales) per branch
    full = 3 * 16 * 16 * D + D + D + N * D + L * k * (norms + attn + ffn) + 2 * D + D * C + C
    count = {m: sum(p.numel() for n, p in model.named_parameters() if n in selected(model, trainable(model, m)))
             for m in FINETUNE_MODES}
    assert count == {"full": full, "attn": L * k * attn + always, "ffn": L * k * ffn + always}
    assert count["full"] == sum(p.numel() for p in model.parameters())


class DeitParallelBlock(nn.Module):
    """deit models_v2.Layer_scale_init_Block_paralx2's names: the second branch is attn1 / mlp1."""

    def __init__(self, dim, num_heads, mlp_ratio=4.0, qkv_bias=True, norm_layer=nn.LayerNorm, **_):
        super().__init__()
        self.norm1, self.norm11 = norm_layer(dim), norm_layer(dim)
        self.attn, self.attn1 = Attention(dim, num_heads, qkv_bias), Attention(dim, num_heads, qkv_bias)
        self.norm2, self.norm21 = norm_layer(dim), norm_layer(dim)
        self.mlp, self.mlp1 = Mlp(dim, int(dim * mlp_ratio)), Mlp(dim, int(dim * mlp_ratio))
        self.gamma_1, self.gamma_1_1, self.gamma_2, self.gamma_2_1 = (nn.Parameter(1e-5 * torch.ones(dim))
                                                                      for _ in range(4))

    def forward(self, x):
        x = x + self.gamma_1 * self.attn(self.norm1(x)) + self.gamma_1_1 * self.attn1(self.norm11(x))
        return x + self.gamma_2 * self.mlp(self.norm2(x)) + self.gamma_2_1 * self.mlp1(self.norm21(x))


def test_deit_names_would_freeze_the_second_branch_and_are_refused():
    with torch.device("meta"):
        deit = VisionTransformer(embed_dim=384, depth=2, num_heads=6, block_fn=DeitParallelBlock)
    attn_params = {f"{m}.{p}" for m, mod in deit.named_modules() if isinstance(mod, Attention)
                   for p, _ in mod.named_parameters()}
    missed = attn_params - deit_attn_only(deit)
    # deit's rule: the first branch's attention is trained, every attn1 parameter stays frozen
    assert missed == {n for n in attn_params if ".attn1." in n} and len(missed) == len(attn_params) // 2
    with pytest.raises(ValueError, match=r"attn1"):
        trainable(deit, "attn")
    with pytest.raises(ValueError, match=r"attn1"):        # names alone: the numbered branch gives it away
        trainable([n for n, _ in deit.named_parameters()], "attn")
    with pytest.raises(ValueError, match=r"mlp1"):
        trainable(deit, "ffn")
    # the book's parallel blocks (timm) name every branch attns.<j>.attn: none is missed
    ours = _meta("vit_S2x2")
    ours_attn = {f"{m}.{p}" for m, mod in ours.named_modules() if isinstance(mod, Attention)
                 for p, _ in mod.named_parameters()}
    assert ours_attn <= selected(ours, trainable(ours, "attn"))
    assert {n.split(".")[3] for n in ours_attn} == {"0", "1"}   # blocks.<i>.attns.<j>: both branches


def test_bad_mode_and_names_without_the_part_are_refused():
    with pytest.raises(ValueError, match="valid choices"):
        trainable(_meta("vit_S"), "mlp")
    with pytest.raises(ValueError, match="no parameter name contains"):
        trainable(["head.weight", "pos_embed"], "attn")


def test_the_trainer_trains_exactly_the_selected_parameters(tmp_path):
    """Through the real trainer on a parallel model: attn-mode fine-tuning changes every branch's
    attention, the head and pos_embed, and nothing else."""
    opts = dict(img_size=8, patch_size=4, width_mult=0.125)     # Ti x 1/8: width 24, 3 heads
    base = dict(model="vit_Ti2x2", model_options=opts, dataset="tiny", img_size=8, batch_size=32, steps=2,
                lr=1e-2, warmup_epochs=0.0)
    run = lambda cfg: train(cfg, data=tiny_data(), records=tmp_path / "rec", cache=tmp_path / "cache",  # noqa: E731
                            progress=False)
    pre = run(base)
    model = create_model("vit_Ti2x2", num_classes=4, **opts)
    tuned = run(dict(base, init_from=pre["hash"], trainable=list(trainable(model, "attn"))))
    w0, w1 = (torch.load(tmp_path / "cache" / r["hash"] / "model.pt", weights_only=True) for r in (pre, tuned))
    on = selected(model, trainable(model, "attn"))
    changed = {k for k in w0 if not torch.equal(w0[k], w1[k])}
    assert changed == on
    assert tuned["trainable_params"] == sum(v.numel() for k, v in w0.items() if k in on)


def test_a_step_with_frozen_parameters_needs_less_memory_and_allocates_no_state_for_them():
    model = create_model("vit_Ti2x2", img_size=32, patch_size=4, width_mult=0.25, num_classes=10)
    cost = {m: train_step_cost(model, 2, 32, trainable=trainable(model, m), steps=1) for m in FINETUNE_MODES}
    n = sum(p.numel() for p in model.parameters())
    for c in cost.values():
        # weights + gradients + AdamW's two moments of the trained parameters are all live at the peak
        assert c["peak_mem_MB"] * 2**20 >= 4 * (n + 3 * c["trainable_params"])
        assert len(c["step_s"]) == 1 and c["step_s"][0] > 0
    assert cost["attn"]["trainable_params"] < cost["ffn"]["trainable_params"] < cost["full"]["trainable_params"] == n
    assert cost["attn"]["peak_mem_MB"] < cost["full"]["peak_mem_MB"]
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)  # the last mode's frozen ones


def test_paired_step_times_alternate_the_modes_each_training_only_its_own_parameters():
    """Figure 4's time ratio is paired: one step of every mode per round, the order alternating, each
    mode's step updating only the parameters it fine-tunes (the others get no gradient)."""
    from vitmlp.measure import paired_step_times
    model = create_model("vit_Ti2x2", img_size=32, patch_size=4, width_mult=0.25, num_classes=10)
    modes = {m: trainable(model, m) for m in ("full", "attn")}
    mlp = next(p for n, p in model.named_parameters() if ".mlp." in n)
    seen = []
    model.register_forward_hook(lambda mod, inp, out: seen.append("full" if mlp.requires_grad else "attn"))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    out = paired_step_times(model, modes, 2, 32, rounds=3)
    assert seen == ["full", "attn"] * 2 + ["attn", "full"] + ["full", "attn"]   # warm-ups, then 3 rounds
    assert {m: len(v) for m, v in out.items()} == {"full": 3, "attn": 3}
    assert mlp.grad is None and not torch.equal(mlp, before[next(n for n, p in model.named_parameters()
                                                                   if p is mlp)])   # attn ran last; full moved it


def test_make_exact_keeps_the_rows_a_notebook_wrote(tmp_path, monkeypatch):
    """`make exact` rewrites its own items of exact.csv and keeps Figure 4's (written by the notebook)."""
    import pandas as pd

    from vitmlp import exact
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path))
    cols = ["item", "row", "quantity", "paper", "book", "match", "note", "model"]
    row = lambda item, book: dict(zip(cols, [item, "r", "params_M", "1", book, "true", "", "m"]))  # noqa: E731
    (tmp_path / "three-things-vit").mkdir()
    pd.DataFrame([row("Table 1", "old"), row("Figure 4", "kept")]).to_csv(
        tmp_path / "three-things-vit" / "exact.csv", index=False)
    monkeypatch.setattr(exact, "table", lambda paper, rows=None: pd.DataFrame([row("Table 1", "new")], columns=cols))
    exact.main(["--paper", "three-things-vit"])
    out = pd.read_csv(tmp_path / "three-things-vit" / "exact.csv", dtype=str, keep_default_na=False)
    assert list(zip(out["item"], out.book)) == [("Table 1", "new"), ("Figure 4", "kept")]
    assert not (tmp_path / "three-things-vit" / "figure4.exact.json").exists()  # the notebook's sidecar is its own
