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
