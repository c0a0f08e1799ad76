"""vitmlp.finetune: the fine-tuning runs of Three things Tables 5-6 (nothing is trained here)."""
import pytest

from vitmlp import finetune as ft
from vitmlp.profiles import get_profile, run_config, sgd_recipe
from vitmlp.records import config_hash


def test_finetune_size_grows_the_grid_by_384_over_224():
    assert ft.finetune_size("paper") == 384          # 14 -> 24 patches of 16 px
    assert ft.finetune_size("cpu") == 56             # 8 -> 14 patches of 4 px
    assert ft.finetune_size("smoke") == 28           # 4 -> 7 patches of 4 px


def test_finetune_arm_starts_from_the_pretrained_run_with_the_mode_and_recipe():
    pre = ft.pretrained("cpu", "S")
    arm, cfg = pre
    assert cfg.seed == 0 and cfg.model_options["layerscale"] == 1e-4 and cfg.epochs == 64   # 4/3 of 48
    attn = ft.finetune_arm("cpu", pre, "attn", "AdamW", img_size=56, epochs=5)
    c = run_config("cpu", attn.model, model_options=attn.model_options, **attn.overrides)
    assert c.init_from == config_hash(cfg)
    assert c.trainable == (".attn.", "head.", "pos_embed") and c.img_size == c.model_options["img_size"] == 56
    assert c.optimizer == "adamw" and c.lr == pytest.approx(cfg.lr / 10) and c.warmup_epochs == 0.0
    sgd = ft.finetune_arm("cpu", pre, "ffn", "SGD")
    c = run_config("cpu", sgd.model, model_options=sgd.model_options, **sgd.overrides)
    assert c.trainable == (".mlp.", "head.", "pos_embed") and c.optimizer == "momentum"
    assert c.lr == pytest.approx(sgd_recipe(get_profile("cpu").batch_size)["lr"] / 10) and c.weight_decay == 1e-4
    full = ft.finetune_arm("cpu", pre, "full", dataset="digits")
    assert "trainable" not in full.overrides and full.label == "ViT-S AdamW full"


def test_finetune_arm_refuses_unknown_mode_and_optimizer():
    pre = ft.pretrained("smoke", "S")
    with pytest.raises(ValueError, match="unknown mode 'mlp'; valid choices: full, attn, ffn"):
        ft.finetune_arm("smoke", pre, "mlp")
    with pytest.raises(ValueError, match="unknown optimizer 'adam'; valid choices: AdamW, SGD"):
        ft.finetune_arm("smoke", pre, "attn", "adam")


def test_cost_counts_the_training_images_and_the_resolution():
    pre = ft.pretrained("cpu", "S")
    on_embedded = ft.finetune_arm("cpu", pre, "full", label="same set")
    on_digits = ft.finetune_arm("cpu", pre, "full", dataset="digits", label="digits")
    sharper = ft.finetune_arm("cpu", pre, "full", img_size=64, label="64 px")
    c = ft.cost("cpu", [on_embedded, on_digits, sharper], on_embedded)
    assert c["same set"] == 1.0
    assert c["digits"] == pytest.approx(1257 / 20000)             # scikit-learn digits: 1257 training images
    assert c["64 px"] > 4                                          # 4x the tokens, attention grows faster


def test_a_pretrained_model_still_learning_or_untrained_leaves_its_finetunings_claims_inconclusive():
    import pandas as pd
    from vitmlp import stats
    from vitmlp.finetune import unsettled_by_pretraining

    def rows(label, finals, gain):
        curve = lambda f: {"val_top1": [f - 30.0, f - 20.0] + [f - gain] * 5 + [f]}   # noqa: E731
        return pd.DataFrame({"label": label, "seed": range(len(finals)), "status": "ok", "num_classes": 10,
                             "final_top1": finals, "curves": [curve(f) for f in finals]})
    runs = pd.concat([rows("S pre", [80.0], 0.5), rows("B pre", [82.0], 3.0), rows("L pre", [11.0], 0.0),
                      *(rows(f"{w} {m}", [70.0 + d, 71.0 + d, 72.0 + d], 0.0)
                        for w in "SBL" for m, d in (("full", 0.0), ("attn", 5.0)))], ignore_index=True)
    pre_of = {f"{w} {m}": f"{w} pre" for w in "SBL" for m in ("full", "attn")}
    runs = runs.assign(unsettled=unsettled_by_pretraining(runs, pre_of))
    t = stats.compare_pairs(runs, [(w, f"{w} full", f"{w} attn", None, "higher") for w in "SBL"]).set_index("claim")
    assert t.loc["S", "verdict"] == stats.REPRODUCED
    assert t.loc["B", "why"] == "not at the plateau: its pre-trained model (B pre) still rose over its last quarter"
    assert t.loc["L", "why"] == "not at the plateau: its pre-trained model (L pre) did not train"
