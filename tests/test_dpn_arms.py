"""Dual PatchNorm's runs (experiment.dpn_arm: Figure 1, Tables 1 and 4) and the "no better" claim
its Figure 1 makes (stats.NOT_HIGHER)."""
import pandas as pd
import pytest
import torch

from vitmlp import parallel_vit as pv
from vitmlp.experiment import DPN_ARCHS, Arm, dpn_arm, dpn_patch, plan
from vitmlp.models import create_model
from vitmlp.models.stems import DPN_TABLE4, DPN_VARIANTS
from vitmlp.models.vit import BLOCK_NORMS
from vitmlp.profiles import run_config
from vitmlp.records import config_hash
from vitmlp.stats import NOT_HIGHER, NOT_REPRODUCED, REPRODUCED, INCONCLUSIVE, compare_pairs, row_verdict


def built(profile, arm):
    cfg = run_config(profile, arm.model, model_options=arm.model_options, **arm.overrides)
    with torch.device("meta"):
        return create_model(cfg.model, **cfg.model_options)


def test_the_papers_patches_keep_their_ratio_at_every_profile():
    assert [dpn_patch(p, 16) for p in ("smoke", "cpu", "gpu", "paper")] == [4, 4, 4, 16]
    assert [dpn_patch(p, 32) for p in ("smoke", "cpu", "gpu", "paper")] == [8, 8, 8, 32]
    with pytest.raises(ValueError, match="unknown paper patch 14; valid choices: 16, 32"):
        dpn_patch("cpu", 14)


def test_each_architecture_is_built_at_the_profiles_scale_with_its_patch():
    shapes = {a: built("cpu", dpn_arm("cpu", a)) for a in DPN_ARCHS}
    assert {a: (m.embed_dim, m.blocks[0].attn.num_heads, len(m.blocks), m.patch_embed.num_patches)
            for a, m in shapes.items()} == {"Ti/16": (24, 3, 6, 64), "S/32": (48, 6, 6, 16), "B/32": (96, 12, 6, 16),
                                            "S/16": (48, 6, 6, 64), "B/16": (96, 12, 6, 64)}
    m = built("paper", dpn_arm("paper", "B/32", dpn="dual"))   # the paper's own model at full size
    assert (m.embed_dim, len(m.blocks), m.patch_embed.num_patches) == (768, 12, 49)


def test_only_what_differs_from_the_vit_enters_the_config():
    assert dpn_arm("cpu", "S/16") == Arm("ViT-S/16", "vit_S", {})
    assert dpn_arm("cpu", "S/32", "post/pre") == Arm("ViT-S/32 LN post/pre", "vit_S",
                                                      {"patch_size": 8, "block_norm": "post/pre"})
    assert dpn_arm("cpu", "B/16", "normformer").label == "ViT-B/16 NormFormer"
    assert dpn_arm("cpu", "Ti/16", dpn="dual") == Arm("ViT-Ti/16 + DPN", "vit_Ti", {"stem": "dpn"})
    assert dpn_arm("cpu", "Ti/16", dpn="post_posemb") == Arm("ViT-Ti/16 + DPN (Post PosEmb)", "vit_Ti",
                                                             {"stem": "dpn", "dpn_variant": "post_posemb"})
    labels = {dpn_arm("cpu", a, b).label for a in DPN_ARCHS for b in BLOCK_NORMS} | \
        {dpn_arm("cpu", a, dpn=v).label for a in DPN_ARCHS for v in DPN_VARIANTS}
    assert len(labels) == 5 * (11 + 7)                              # every run has its own label
    assert set(DPN_TABLE4.values()) == set(DPN_VARIANTS) - {"dual"}  # Table 4 names every ablation once


def test_the_chapters_notebooks_share_one_run_per_configuration():
    # Figures 2 and 3 plan ViT-Ti + DPN and ViT-B with and without DPN with their own labels
    theirs = plan("cpu", [Arm("ViT-Ti + DPN", "vit_Ti", {"stem": "dpn"}), Arm("ViT-B", "vit_B", {}),
                          Arm("ViT-B + DPN", "vit_B", {"stem": "dpn"})], [0])
    ours = plan("cpu", [dpn_arm("cpu", "Ti/16", dpn="dual"), dpn_arm("cpu", "B/16"), dpn_arm("cpu", "B/16", dpn="dual")], [0])
    assert [config_hash(c) for _, c in ours] == [config_hash(c) for _, c in theirs]
    assert run_config("cpu", "vit_S", seed=0) == plan("cpu", [dpn_arm("cpu", "S/16")], [0])[0][1]  # the book's ViT-S baseline


def test_bad_choices_are_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown Dual PatchNorm architecture 'L/16'; valid choices: Ti/16, S/32, B/32"):
        dpn_arm("cpu", "L/16")
    with pytest.raises(ValueError, match="unknown block_norm 'post'; valid choices: pre/pre"):
        dpn_arm("cpu", "S/16", "post")
    with pytest.raises(ValueError, match="unknown dpn 'both'; valid choices: None, dual, pre"):
        dpn_arm("cpu", "S/16", dpn="both")


def test_a_dpn_stem_costs_what_the_patchify_stem_costs():
    # LayerNorms are not counted; DPN's dense projection runs once per patch, as the patchify conv
    with torch.device("meta"):
        opts = dict(img_size=32, patch_size=4, width_mult=0.25)
        assert pv.forward_macs(create_model("vit_S", stem="dpn", **opts)) == pv.forward_macs(create_model("vit_S", **opts))


@pytest.mark.parametrize("other, verdict, why", [
    ([50.8, 51.0, 51.2], REPRODUCED, "90 % interval below +1"),          # the same as the baseline
    ([40.0, 42.0, 44.0], REPRODUCED, "90 % interval below +1"),          # a loss of any size agrees
    ([53.8, 54.0, 54.2], NOT_REPRODUCED, "95 % interval above +1"),      # 3 points better beyond noise
    ([50.0, 53.0, 56.0], INCONCLUSIVE, "interval [-5.4, +9.4] reaches +1"),
])
def test_a_no_better_claim_is_the_upper_half_of_about_the_same(other, verdict, why):
    v = row_verdict(NOT_HIGHER, [50.8, 51.0, 51.2], other, margin=1.0)
    assert (v["verdict"], v["why"]) == (verdict, why)
    assert (v["p_paper"] < 0.05) == (verdict == REPRODUCED) and (v["p_other"] < 0.025) == (verdict == NOT_REPRODUCED)


def test_compare_pairs_takes_not_higher_as_the_texts_direction():
    df = pd.DataFrame([{"label": l, "seed": s, "status": "ok", "final_top1": v, "num_classes": 10}
                       for l, vs in {"pre": [80.8, 81.0, 81.2], "post": [79.5, 80.0, 80.5], "flat": [10.0, 11.0, 9.0]}.items()
                       for s, v in enumerate(vs)])
    t = compare_pairs(df, [("none better", "pre", "post", None, "not higher"),
                              ("none better", "pre", "flat", None, "not higher")])
    assert list(t.paper) == ["not higher"] * 2 and t["paper Δ"].isna().all()
    assert list(t.verdict) == [REPRODUCED, INCONCLUSIVE] and t.why[1].startswith("did not train")
