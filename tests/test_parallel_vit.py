"""The runs of Three things' parallel-ViT items (vitmlp.parallel_vit) and the constant drop-path rule."""
import pytest
import torch

from vitmlp import parallel_vit as pv
from vitmlp.experiment import plan
from vitmlp.measure import count_macs
from vitmlp.models import create_model
from vitmlp.profiles import get_profile, run_config
from vitmlp.records import config_hash

TINY = dict(img_size=16, patch_size=4, width_mult=0.125)


def test_spec_names_blocks_split_into_branches():
    assert pv.spec("B", 36) == "B36x1" and pv.spec("B", 36, 2) == "B18x2" and pv.spec("S", 60, 4) == "S15x4"
    with pytest.raises(ValueError, match="36 blocks do not split into 5 equal branches"):
        pv.spec("B", 36, 5)
    with pytest.raises(ValueError, match="unknown width 'M'"):
        pv.spec("M", 12)


def test_arm_carries_the_papers_recipe():
    lr = get_profile("smoke").recipe["lr"]
    b = pv.arm("smoke", "B", 36, 2, ls=True, longer=True)
    assert (b.label, b.model) == ("B18x2 +LS (4/3 schedule)", "vit_B18x2")
    assert b.model_options == {"drop_path": 0.1, "drop_path_schedule": "constant", "layerscale": 1e-4}
    assert b.overrides == {"lr": 0.75 * lr, "epochs": 2}   # smoke: 1 epoch -> at least one more
    ti = pv.arm("smoke", "Ti", 12)
    assert (ti.model_options, ti.overrides) == ({}, {})
    assert pv.costly(b) and pv.costly(pv.arm("smoke", "L", 24)) and not pv.costly(ti)


def test_longer_epochs_is_four_thirds():
    assert pv.longer_epochs("cpu") == max(get_profile("cpu").epochs + 1, round(get_profile("cpu").epochs * 4 / 3))
    assert pv.longer_epochs("paper") == 400


def test_the_same_row_in_two_notebooks_is_one_run():
    a, b = plan("smoke", [pv.arm("smoke", "B", 36)]), plan("smoke", [pv.arm("smoke", "B", 36, label="other")])
    assert config_hash(a[0][1]) == config_hash(b[0][1])


def test_constant_drop_path_in_every_block_and_branch():
    m = create_model("vit_S4x2", drop_path=0.1, drop_path_schedule="constant", **TINY)
    assert [a.drop_path.drop_prob for b in m.blocks for a in b.attns] == [0.1] * 8
    m = create_model("vit_S4", drop_path=0.1, **TINY)  # timm's linear rule stays the default
    assert [getattr(b.drop_path1, "drop_prob", 0.0) for b in m.blocks][0] == 0.0
    with pytest.raises(ValueError, match="unknown drop_path_schedule 'cosine'; valid choices: linear, constant"):
        create_model("vit_S4", drop_path_schedule="cosine", **TINY)


def test_forward_macs_matches_fvcore_within_two_percent():
    for name in ("vit_S12x1", "vit_B6x2"):
        m = create_model(name, img_size=32, patch_size=4, width_mult=0.25)
        assert pv.forward_macs(m) == pytest.approx(count_macs(m, 32), rel=0.02)  # fvcore also counts norms, GELU, softmax


def test_forward_macs_counts_every_layer_of_a_stem():
    for stem in ("hmlp_bn", "levit_ln", "volo"):   # several convs before the patch projection
        m = create_model("vit_S12x1", img_size=32, patch_size=4, width_mult=0.125, stem=stem)
        assert pv.forward_macs(m) == pytest.approx(count_macs(m, 32), rel=0.03)
    d = 48   # hMLP at 32 px, 4-px patches: conv 1/1 3->D/4 at 32x32, conv 2/2 D/4->D/4 at 16x16, conv 2/2 D/4->D at 8x8
    m = create_model("vit_S", img_size=32, patch_size=4, width_mult=0.125, stem="hmlp_bn")
    assert pv.stem_macs(m.patch_embed) == 3 * d // 4 * 32 ** 2 + (d // 4) ** 2 * 4 * 16 ** 2 + d // 4 * d * 4 * 8 ** 2
    lin = create_model("vit_S", img_size=32, patch_size=4, width_mult=0.125)
    assert pv.stem_macs(lin.patch_embed) == 3 * 16 * d * 8 ** 2   # the patchify conv: once per patch
    assert pv.forward_macs(m) > pv.forward_macs(lin)


def test_macs_is_forward_macs_of_the_arms_model_at_the_profile():
    a = pv.arm("smoke", "S", 12, stem="levit_bn")
    cfg = run_config("smoke", a.model, model_options=a.model_options)
    assert pv.macs("smoke", a) == pv.forward_macs(create_model(cfg.model, **cfg.model_options))
    assert pv.macs("smoke", a) > pv.macs("smoke", pv.arm("smoke", "S", 12))


def test_arm_with_a_stem_keeps_the_linear_row_as_tables_1_to_3_run_it():
    base, linear = pv.arm("smoke", "S", 12, label="ViT-S"), pv.arm("smoke", "S", 12, stem="linear")
    assert config_hash(plan("smoke", [base])[0][1]) == config_hash(plan("smoke", [linear])[0][1])
    h = pv.arm("smoke", "S", 12, stem="hmlp_ln")
    assert h.label == "S12x1 hmlp_ln stem" and h.model_options["stem"] == "hmlp_ln" and h.model == "vit_S12x1"
    with pytest.raises(ValueError, match="unknown stem 'conv'; valid choices: linear, linear_bn"):
        pv.arm("smoke", "S", 12, stem="conv")


@pytest.mark.parametrize("profile, expected", [("paper", 13), ("colab", 13), ("gpu", 14), ("cpu", 14), ("smoke", 14)])
def test_one_more_block_survives_the_profiles_depth_rounding(profile, expected):
    more = pv.one_more_block(profile, 12)
    assert more == expected
    depth = lambda blocks: len(create_model(f"vit_S{blocks}", **get_profile(profile).scale).blocks)  # noqa: E731
    with torch.device("meta"):
        assert depth(more) == depth(12) + 1


def test_cost_counts_epochs_and_size():
    base = pv.arm("smoke", "S", 12)
    c = pv.cost("smoke", [base, pv.arm("smoke", "S", 12, longer=True), pv.arm("smoke", "S", 24, 2)], base)
    assert c["S12x1"] == 1 and c["S12x1 (4/3 schedule)"] == pv.longer_epochs("smoke") / get_profile("smoke").epochs
    assert 1.9 < c["S12x2"] < 2.1   # twice the blocks
    with torch.device("meta"):
        assert pv.forward_macs(create_model("vit_S", num_classes=10)) > 0
    assert run_config("smoke", base.model, model_options=base.model_options).model == "vit_S12x1"


def test_split_scale_builds_every_branch_whole_and_keeps_a_runs_cost():
    figure1 = [b // br for b in (36, 60) for br in (1, 2, 3, 4)]      # 9, 15 and 20 share no divisor
    assert pv.split_scale("cpu", figure1) == {"depth_mult": 1.0, "width_mult": 0.0884}   # x1/8 / sqrt(2)
    assert pv.split_scale("cpu", [24, 12, 8, 6]) == {}                 # the profile's x1/2 already builds them whole
    assert pv.split_scale("cpu", [9]) == {"depth_mult": 5 / 9, "width_mult": 0.1186}   # the next multiple of 1/9
    assert pv.split_scale("colab", figure1) == {} and pv.split_scale("paper", figure1) == {}   # full depth: nothing to do
    with pytest.raises(ValueError, match="depth must be a positive int"):
        pv.split_scale("cpu", [0])
    # at the profile's own x1/2, S9x4 would build 16 blocks beside S36x1's 18
    assert pv.built_blocks("cpu", pv.arm("cpu", "S", 36, 4))[1] == 16
    scale = pv.section3_scale("cpu")
    base = pv.arm("cpu", "S", 12)
    for w, b in (("S", 36), ("S", 60), ("B", 36)):
        built = [pv.built_blocks("cpu", pv.arm("cpu", w, b, br, scale=scale)) for br in (1, 2, 3, 4)]
        assert [t for _, t, _ in built] == [b] * 4 and [n for n, _, _ in built] == [b // br for br in (1, 2, 3, 4)]
        cost = pv.cost("cpu", [pv.arm("cpu", w, b, scale=scale, label="x"), pv.arm("cpu", w, b, label="y")], base)
        assert 0.9 < cost["x"] / cost["y"] < 1.3   # width / sqrt(2) pays for twice the depth (attention grows faster)
    widths = {w: pv.built_blocks("cpu", pv.arm("cpu", w, 24, scale=scale))[2] for w in ("Ti", "S", "B", "L")}
    assert widths == {"Ti": 18, "S": 36, "B": 72, "L": 96}   # head dim 6 everywhere: the paper's width ratios


def test_section3_scale_makes_s60_the_deepest_and_shares_rows():
    scale = pv.section3_scale("cpu")
    assert scale == pv.split_scale("cpu", {b // br for b, br in pv.SECTION3})
    layers = {(b, br): pv.built_blocks("cpu", pv.arm("cpu", "S", b, br, scale=scale))[0] for b, br in pv.SECTION3}
    assert max(layers, key=layers.get) == (60, 1) and layers[60, 1] == 60
    chapter = [pv.arm("cpu", "L", 24), pv.arm("cpu", "B", 12), pv.arm("cpu", "S", pv.one_more_block("cpu", 12))]
    assert all(pv.built_blocks("cpu", a)[0] < 60 for a in chapter)   # Tables 1 and 7 at the profile's depth
    # Table 3's S48x1 and Figure 3's are one run; Table 1's ViT-B is not Table 3's B12x1 (another scale)
    t3, f3 = pv.arm("cpu", "S", 48, scale=scale, label="S48x1"), pv.arm("cpu", "S", 48, scale=pv.section3_scale("cpu", [(36, 4)]))
    assert config_hash(plan("cpu", [t3])[0][1]) == config_hash(plan("cpu", [f3])[0][1])
    assert config_hash(plan("cpu", [pv.arm("cpu", "B", 12, scale=scale)])[0][1]) != \
        config_hash(plan("cpu", [pv.arm("cpu", "B", 12)])[0][1])
    assert pv.section3_scale("paper") == {} and pv.section3_scale("colab") == {}
    with pytest.raises(ValueError, match="36 blocks do not split into 5 equal branches"):
        pv.section3_scale("cpu", [(36, 5)])
    with pytest.raises(ValueError, match="unknown scale option 'img_size'"):
        pv.arm("cpu", "S", 12, scale={"img_size": 64})


def test_row_seeds_give_the_costly_rows_an_interval_unless_asked():
    assert get_profile("cpu").costly_seeds == 1   # the profile's saving, not this chapter's default
    assert pv.row_seeds("cpu") == ([0, 1, 2], [0, 1, 2])
    assert pv.row_seeds("cpu", seeds=5, costly_seeds=1) == ([0, 1, 2, 3, 4], [0])
    runs = plan("smoke", [pv.arm("smoke", "S", 12)], [0, 1]) + plan("smoke", [pv.arm("smoke", "B", 12)], [0])
    note = pv.seed_note(runs)
    assert note.startswith("1 of 2 rows train a single seed (B12x1)") and "no verdict" in note
    assert pv.seed_note(plan("smoke", [pv.arm("smoke", "B", 12)], [0, 1])) == ""
