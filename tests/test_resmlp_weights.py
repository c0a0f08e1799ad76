"""The ResMLP analysis notebooks (Figures 2, 3, B.1, B.2) on timm's weights, offline: random-init
checkpoints of the paper's three timm models saved locally stand in for the ImageNet ones."""
import json

import pandas as pd
import papermill as pm
import pytest
import torch

from vitmlp import run as runner
from vitmlp.analysis import sparsity
from vitmlp.results import REPO

from conftest import save_random_checkpoints

NB = REPO / "notebooks" / "resmlp"
CROSS, SPARSITY = NB / "figure2+figureB1_cross_patch.ipynb", NB / "figure3+figureB2_sparsity.ipynb"
TIMM = ["resmlp_24_224.fb_in1k", "resmlp_12_224.fb_in1k", "resmlp_12_224.fb_distilled_in1k"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """{timm name: file} of randomly initialised full-size models (a different seed each)."""
    return save_random_checkpoints(tmp_path_factory.mktemp("checkpoints"), TIMM)


def test_notebooks_analyse_the_given_timm_checkpoints(checkpoints, sandbox):
    for nb in (CROSS, SPARSITY):
        runner.execute(nb, {"profile": "smoke", "weights": "timm", "checkpoints": checkpoints}, sandbox / "book")
    res = sandbox / "results" / "resmlp"
    for slug, model in [("figure2", "resmlp_24"), ("figureB1", "resmlp_12"), ("figure3", "resmlp_24"),
                        ("figureB2", "resmlp_12")]:
        side = json.loads((res / f"{slug}.analysis.json").read_text())
        assert side["profile"] == "timm ImageNet weights" and model in side["summary"]
        assert side["verdict"] and (res / f"{slug}.analysis.png").exists()
    # every layer of the 14x14-grid models, and the numbers come from the checkpoint's weights
    assert len(pd.read_csv(res / "figure2.analysis.csv")) == 24
    assert len(pd.read_csv(res / "figureB1.analysis.csv")) == 12
    fig3 = pd.read_csv(res / "figure3.analysis.csv")
    state = torch.load(checkpoints[TIMM[0]], weights_only=True)
    for layer in (1, 24):
        row = fig3[(fig3.state == "trained") & (fig3.layer == layer)].iloc[0]
        w = state[f"blocks.{layer - 1}.linear_tokens.weight"]
        assert row.A == pytest.approx(sparsity(w), abs=1e-4)
        assert row.B == pytest.approx(sparsity(state[f"blocks.{layer - 1}.mlp_channels.fc1.weight"]), abs=1e-4)
    init = fig3[fig3.state == "init"]
    assert len(init) == 24 and not (init.A.to_numpy() == fig3[fig3.state == "trained"].A.to_numpy()).all()
    b2 = pd.read_csv(res / "figureB2.analysis.csv")
    assert set(b2.model) == {"ResMLP-S12", "ResMLP-S12 distilled"}


@pytest.mark.parametrize("nb, params, error", [
    (CROSS, {"weights": "imagenet"}, "unknown weights 'imagenet'; valid choices: book, timm"),
    (SPARSITY, {"weights": "timm", "checkpoints": {"resmlp_12_224": "x.pt"}},
     "valid choices: resmlp_24_224.fb_in1k, resmlp_12_224.fb_in1k, resmlp_12_224.fb_distilled_in1k"),
], ids=["unknown weights", "unknown timm name"])   # other bad values: tests/test_analysis.py
def test_bad_weights_refused_before_anything_is_written(nb, params, error, sandbox):
    with pytest.raises((pm.PapermillExecutionError, SystemExit), match=error):  # SystemExit: refused before a kernel
        runner.execute(nb, {"profile": "smoke", **params}, sandbox / "book")
    assert not (sandbox / "results").exists()
    assert not (sandbox / "book").exists() or not any((sandbox / "book").rglob("*.ipynb"))
