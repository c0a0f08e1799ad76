"""The MLP-Mixer notebooks' options: the analysis notebooks on timm's weights, offline (random-init
timm checkpoints saved locally stand in for the published files, ``checkpoints``); the throughput
notebook's best-of-batches protocol; bad parameters write nothing."""
import json

import papermill as pm
import pytest

from vitmlp import run as runner
from vitmlp.results import REPO

from conftest import save_random_checkpoints

NB = REPO / "notebooks" / "mlp-mixer"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{timm name: file} of randomly initialised Mixer-B/16 and B/32 (timm publishes no /32 weights)."""
    return save_random_checkpoints(tmp_path_factory.mktemp("checkpoints"), ("mixer_b16_224", "mixer_b32_224"))


def sidecar(sandbox, slug):
    return json.loads((sandbox / "results" / "mlp-mixer" / f"{slug}.analysis.json").read_text())


def test_token_mixing_units_from_timm_weights(sandbox, checkpoints):
    params = {"profile": "smoke", "weights": "timm", "checkpoints": {"mixer_b16_224": checkpoints["mixer_b16_224"]}}
    runner.execute(NB / "figure5+figure6_token_mixing.ipynb", params, sandbox / "book")
    for slug in ("figure5", "figure6"):
        rec = sidecar(sandbox, slug)
        assert rec["profile"] == "timm ImageNet weights" and rec["verdict"]
        assert "384 units per layer on a 14x14 grid" in rec["summary"]
    assert not (sandbox / "results" / "runs").exists()       # nothing trained on the timm path


def test_stem_filters_from_timm_weights_with_and_without_a_32_px_patch_model(sandbox, checkpoints):
    nb = NB / "figure7_stem_filters.ipynb"
    runner.execute(nb, {"profile": "smoke", "weights": "timm", "checkpoints": checkpoints}, sandbox / "book")
    rec = sidecar(sandbox, "figure7")
    table = (sandbox / "results" / "mlp-mixer" / "figure7.analysis.csv").read_text()
    assert rec["verdict"] != "not reproducible here" and "mixer_b32_224 (local file)" in table
    only16 = {"mixer_b16_224": checkpoints["mixer_b16_224"]}  # what timm publishes: no /32 Mixer
    runner.execute(nb, {"profile": "smoke", "weights": "timm", "checkpoints": only16}, sandbox / "book")
    rec = sidecar(sandbox, "figure7")
    assert rec["verdict"] == "not reproducible here" and "publishes no /32" in rec["summary"]


def test_throughput_keeps_each_models_best_batch(sandbox):
    runner.execute(NB / "table2+table3+figure2+figure3_external.ipynb", {"profile": "smoke", "batch": [1, 2]},
                   sandbox / "book")
    rec = json.loads((sandbox / "results" / "mlp-mixer" / "table3.measured.json").read_text())
    assert "best of batches 1/2" in rec["summary"]
    assert (sandbox / "results" / "mlp-mixer" / "table3.measured.csv").read_text().splitlines()[0].count(",batch,") == 1


@pytest.mark.parametrize("stem, params, error", [
    ("figure5+figure6_token_mixing", {"weights": "imagenet"}, "valid choices: book, timm"),
    ("figure7_stem_filters", {"weights": "timm", "checkpoints": {"mixer_b16_224": "/nonexistent.pth"}},
     "no file /nonexistent.pth"),
    ("figure5+figure6_token_mixing", {"weights": "timm", "seeds": -1}, "seeds must be"),
    ("table2+table3+figure2+figure3_external", {"batch": [2, 0]}, r"batch\[1\] must be a positive int, got 0"),
    ("table2+table3+figure2+figure3_external", {"batch": []}, r"batch must be a non-empty list, got \[\]"),
])
def test_bad_parameters_are_refused_before_anything_is_written(sandbox, stem, params, error):
    with pytest.raises((pm.PapermillExecutionError, SystemExit), match=error):  # SystemExit: refused before a kernel
        runner.execute(NB / f"{stem}.ipynb", {"profile": "smoke", **params}, sandbox / "book")
    assert not (sandbox / "results").exists()
    assert not (sandbox / "book").exists() or not any((sandbox / "book").rglob("*.ipynb"))
