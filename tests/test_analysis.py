"""Analysis numbers on matrices whose answer is known by construction."""
import math

import pandas as pd
import pytest
import torch

from vitmlp.analysis import (book_models, central_rows, check_weights, locality, shift_similarity, sparsity,
                             timm_models)


def test_sparsity_counts_entries_below_five_percent_of_the_max():
    w = torch.tensor([[10.0, -0.4, 0.6], [0.49, -10.0, 5.0]])
    assert sparsity(w) == pytest.approx(2 / 6)            # 0.4 and 0.49 < 0.5; 0.6 is not
    assert sparsity(w, rel=0.7) == pytest.approx(4 / 6)   # everything but the two 10s
    assert sparsity(torch.ones(5)) == 0.0


def test_locality_of_identity_convolution_and_uniform_matrices():
    g = 6
    N = g * g
    eye = locality(torch.eye(N), g)
    assert eye["self"] == 1.0 and eye["near"] == 0.0 and eye["far"] == 0.0
    pos = torch.stack(torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij"), -1).view(-1, 2)
    conv = ((pos[:, None] - pos[None]).abs().amax(-1) <= 1).float()        # a 3x3 box filter
    c = locality(conv, g)
    assert c["self"] == pytest.approx(1 / 9) and c["near"] == pytest.approx(8 / 9) and c["far"] == 0.0
    u = locality(torch.ones(N, N), g)
    assert u["near"] == pytest.approx(u["near_uniform"]) == pytest.approx(8 / N)
    assert u["self"] + u["near"] + u["far"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"\(36, 36\)"):
        locality(torch.eye(10), g)


def test_central_rows_are_the_rows_of_the_central_patches():
    g = 4
    A = torch.arange(16 * 16, dtype=torch.float32).view(16, 16)
    rows = central_rows(A, g, 2)                      # patches (1,1) (1,2) (2,1) (2,2) = 5 6 9 10
    assert rows.shape == (2, 2, 4, 4)
    assert torch.equal(rows[0, 1].flatten(), A[6]) and torch.equal(rows[1, 0].flatten(), A[9])
    with pytest.raises(ValueError, match="k must be"):
        central_rows(A, g, 5)


def test_shift_similarity_is_one_for_convolutions_and_near_zero_for_noise():
    g = 8
    pos = torch.stack(torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij"), -1).view(-1, 2)
    d = pos[None] - pos[:, None] + 1                    # (N, N, 2) input offset from the output patch
    kernel = torch.randn(3, 3, generator=torch.Generator().manual_seed(0))
    inside = ((d >= 0) & (d < 3)).all(-1)
    conv = torch.where(inside, kernel[d[..., 0].clamp(0, 2), d[..., 1].clamp(0, 2)], torch.tensor(0.0))
    assert shift_similarity(conv, g) == pytest.approx(1.0)
    assert shift_similarity(torch.eye(g * g), g) == pytest.approx(1.0)       # a 1x1 convolution
    noise = torch.randn(g * g, g * g, generator=torch.Generator().manual_seed(1))
    assert abs(shift_similarity(noise, g)) < 0.1
    flipped = conv.flip(1)                              # rows no longer move with the patch
    assert shift_similarity(flipped, g) < 0.5
    with pytest.raises(ValueError, match=r"\(64, 64\)"):
        shift_similarity(torch.eye(10), g)


def test_check_weights_refuses_bad_values(tmp_path):
    assert check_weights("book", None, ["a"]) == {}
    f = tmp_path / "a.pt"
    f.write_bytes(b"")
    assert check_weights("timm", {"a": str(f)}, ["a", "b"]) == {"a": f}
    with pytest.raises(ValueError, match="valid choices: book, timm"):
        check_weights("imagenet", None, ["a"])
    with pytest.raises(ValueError, match="with weights='timm'"):
        check_weights("book", {"a": str(f)}, ["a"])
    with pytest.raises(ValueError, match="valid choices: a, b"):
        check_weights("timm", {"c": str(f)}, ["a", "b"])
    with pytest.raises(FileNotFoundError, match="no file"):
        check_weights("timm", {"b": str(tmp_path / "missing.pt")}, ["a", "b"])


def test_timm_models_reads_the_local_checkpoint(tmp_path):
    import timm
    torch.manual_seed(5)
    saved = timm.create_model("test_vit")
    torch.save(saved.state_dict(), tmp_path / "w.pt")
    trained, init = timm_models("test_vit", {"test_vit": tmp_path / "w.pt"})

    def same(a, b):
        return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert same(trained, saved) and not same(init, saved)


def test_book_models_rebuild_the_weights_a_run_started_from(tmp_path, monkeypatch):
    from vitmlp.profiles import run_config
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "records"))
    monkeypatch.setenv("VITMLP_PROGRESS", "0")
    # only the head trains, so the blocks keep the initial weights the trainer drew
    cfg = run_config("smoke", "resmlp_S12", seed=3, trainable=["head"])
    trained, init = book_models(cfg)
    t, i = trained.state_dict(), init.state_dict()
    assert t.keys() == i.keys()
    assert all(torch.equal(t[k], i[k]) for k in t if k.startswith("blocks."))
    assert not torch.equal(t["head.weight"], i["head.weight"])
    _, init4 = book_models(run_config("smoke", "resmlp_S12", seed=4, trainable=["head"]))
    a4 = init4.state_dict()["blocks.0.linear_tokens.weight"]          # another seed, other weights
    assert not torch.equal(a4, i["blocks.0.linear_tokens.weight"])


def test_low_frequency_share_and_centroid_of_known_images():
    from vitmlp.analysis import low_frequency_share, smoothness, spectral_centroid
    n = 8
    yy, xx = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    flat = torch.ones(1, n, n)
    smooth = torch.cos(2 * torch.pi * xx / n)[None]             # 1/8 cycle per sample
    checker = ((-1.0) ** (xx + yy))[None]                       # Nyquist: 0.5 cycle per sample on both axes
    x = torch.cat([flat, smooth, checker])
    assert low_frequency_share(x).tolist() == pytest.approx([1.0, 1.0, 0.0], abs=1e-6)
    assert spectral_centroid(x).tolist() == pytest.approx([0.0, 1 / 8, 0.5 ** 0.5], abs=1e-6)
    rgb = torch.stack([smooth[0], checker[0], flat[0]])[None]     # channels add their energy: cos has half
    assert low_frequency_share(rgb).item() == pytest.approx(1.5 / 2.5, abs=1e-6)   # the energy of +-1 or 1
    noise = torch.randn(2000, n, n)                             # white noise: the share of bins below 0.25
    assert low_frequency_share(noise).mean().item() == pytest.approx(13 / 64, abs=0.02)
    assert smoothness(noise).mean().item() == pytest.approx(0.0, abs=0.02)
    assert smoothness(torch.randn(2000, 3, 4, 4)).mean().item() == pytest.approx(0.0, abs=0.02)  # any size
    assert smoothness(x).tolist() == pytest.approx([1.0, 1.0, -13 / 51], abs=1e-6)


def test_closest_inverse_and_pairing_find_opposite_phases():
    from vitmlp.analysis import closest_inverse, pair_by_frequency
    g = torch.Generator().manual_seed(0)
    n = 6
    xx = torch.arange(n).float()
    low = torch.cos(2 * torch.pi * xx / n)[None, :].expand(n, n)           # smooth stripes
    high = torch.cos(2 * torch.pi * 2 * xx / n)[None, :].expand(n, n)      # finer stripes
    units = torch.stack([high, low, -high + 0.01 * torch.randn(n, n, generator=g), -low,
                         torch.randn(n, n, generator=g)])
    idx, corr = closest_inverse(units)
    assert idx[:4].tolist() == [2, 3, 0, 1] and (corr[:4] < -0.99).all()
    assert pair_by_frequency(units)[:4] == [1, 3, 0, 2]      # low pair first, each unit beside its inverse
    assert sorted(pair_by_frequency(units)) == list(range(5))


def test_mosaic_tiles_images_row_by_row():
    from vitmlp.analysis import mosaic
    imgs = torch.arange(5 * 2 * 3, dtype=torch.float).view(5, 2, 3)
    m = mosaic(imgs, cols=2)
    assert m.shape == (3 * 3 - 1, 2 * 4 - 1)
    assert torch.equal(m[3:5, 4:7], imgs[3]) and torch.equal(m[6:8, 0:3], imgs[4])
    assert torch.isnan(m[2]).all() and torch.isnan(m[6:8, 4:]).all()      # padding row, missing 6th image
    rgb = mosaic(torch.rand(4, 3, 2, 2), cols=4, fill=1.0)
    assert rgb.shape == (2, 11, 3) and (rgb[:, 2] == 1).all()


def test_layer_tokens_are_the_stem_the_position_embedding_and_every_block_without_the_class_token():
    from vitmlp.analysis import block_input, layer_tokens
    from vitmlp.models import create_model
    torch.manual_seed(0)
    m = create_model("vit_S", img_size=16, patch_size=4, width_mult=0.125, depth_mult=0.25, num_classes=3).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        t = layer_tokens(m, x)
        assert list(t) == ["stem", "pos_embed", "block 1", "block 2", "block 3"]
        assert all(v.shape == (2, 16, 48) for v in t.values())                  # 4x4 patches, width 384/8
        assert torch.equal(t["stem"], m.patch_embed(x))
        assert torch.equal(t["pos_embed"], block_input(m, x)[:, 1:])           # the class token dropped
        assert torch.allclose(t["pos_embed"], t["stem"] + m.pos_embed[:, 1:])  # timm adds pos_embed to the patches
        assert torch.allclose(t["block 3"], m.blocks(block_input(m, x))[:, 1:])  # before the final norm


def test_fit_gap_scores_the_final_weights_on_clean_train_and_val_images(tmp_path, monkeypatch):
    """fit_gap's val numbers are the record's own final val top-1 / loss (same weights, same
    unaugmented val set); its train numbers come from the training images without augmentation."""
    from vitmlp.analysis import fit_gap
    from vitmlp.experiment import Arm, plan
    from vitmlp.train import train
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "r"))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "c"))
    cfg = plan("smoke", [Arm("a", "mixer_S16", overrides={"epochs": 2, "precision": "fp32"})], seeds=1)[0][1]
    rec = train(cfg)
    gap = fit_gap(cfg)
    assert gap["val_top1"] == pytest.approx(rec["metrics"]["final_top1"])
    assert gap["val_loss"] == pytest.approx(rec["metrics"]["final_val_loss"], rel=1e-5)
    assert 0 <= gap["train_top1"] <= 100 and gap["train_loss"] > 0
    assert fit_gap(cfg, train_images=64)["train_top1"] * 64 / 100 == pytest.approx(
        round(fit_gap(cfg, train_images=64)["train_top1"] * 64 / 100))   # a share of exactly 64 images


def test_weights_rebuilt_far_from_their_record_are_not_read_as_that_run(tmp_path, monkeypatch):
    """A rebuild on another device that lands 31 points below its record (seen: a ViT-B, 66.7 vs 97.8)
    took another trajectory: fit_gaps leaves it out, book_models refuses it, the page's training line
    names it; a rebuild within the tolerance is read as the run's weights."""
    import json
    from vitmlp.analysis import fit_gaps
    from vitmlp.experiment import Arm, plan, training_time
    from vitmlp.records import config_hash, run_cache
    from vitmlp.train import train
    from vitmlp.train.trainer import REBUILD_TOLERANCE, REBUILT, rebuild_gap, rebuilt_weights
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "r"))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "c"))
    cfg = plan("smoke", [Arm("a", "mixer_S16", overrides={"epochs": 1, "precision": "fp32"})], seeds=1)[0][1]
    rec, h = train(cfg), config_hash(cfg)
    top1 = rec["metrics"]["final_top1"]
    assert rebuild_gap(rebuilt_weights(h)) == 0.0 and not math.isnan(fit_gaps([cfg])[0]["val_top1"])   # the run's own weights

    def rebuilt(delta):
        (run_cache(h) / REBUILT).write_text(json.dumps({
            "rebuilt": {"hardware": "AVX-512 BF16", "precision": "bf16", "final_top1": top1 + delta},
            "record": {"hardware": "NVIDIA H200", "precision": "bf16", "final_top1": top1}, "created": "t"}))
    rebuilt(REBUILD_TOLERANCE / 2)
    assert not math.isnan(fit_gaps([cfg])[0]["val_top1"]) and book_models(cfg)[0] is not None
    rebuilt(-31.1)
    assert rebuild_gap(rebuilt_weights(h)) == pytest.approx(31.1)
    assert all(math.isnan(v) for v in fit_gaps([cfg])[0].values())
    with pytest.raises(ValueError, match="another trajectory"):
        book_models(cfg)
    said = training_time(pd.DataFrame({"hash": [h], "reads_weights": True, "cores": 2, "threads": 1,
                                       "wall_time_s": 60.0, "gpu": None}))
    assert f"run {h[:8]}'s rebuild lands 31.1 points from its record (beyond the {REBUILD_TOLERANCE:g}-point " \
           "tolerance: another trajectory, not read as that run's)" in said
