"""What notebooks leave to the library (issue 13): the checks of their parameters (vitmlp.choices),
the Profile fields their defaults depend on, and the source an item records (the runner's notebook)."""
import json
import os
from functools import partial

import pandas as pd
import pytest

from vitmlp import run as runner
from vitmlp.choices import (check_bool, check_choice, check_int, check_list, check_number, check_prefix,
                            check_tuples, pick)
from vitmlp.profiles import PROFILES, get_profile
from vitmlp.results import INTERACTIVE, NOTEBOOK_ENV, REPO, current_source, notebook_path, save_item

TABLE3_ROWS = ["S12", "S24", "B24"]


# --- the checks ----------------------------------------------------------------------------------
def test_pick_names_the_valid_choices_and_the_missing_required_ones():
    assert pick("rows", None, TABLE3_ROWS) == TABLE3_ROWS                 # None: every valid choice
    assert pick("rows", ["B24", "S12", "B24"], TABLE3_ROWS) == ["B24", "S12"]
    with pytest.raises(ValueError, match="unknown rows entry 'S13'; valid choices: S12, S24, B24"):
        pick("rows", ["S12", "S13"], TABLE3_ROWS)
    with pytest.raises(ValueError, match="rows must include 'S12': the baseline; got \\['S24'\\]"):
        pick("rows", ["S24"], TABLE3_ROWS, required=["S12"], because="the baseline")
    for bad in ([], "S12", 3):
        with pytest.raises(ValueError, match="rows must be a non-empty list from: S12, S24, B24"):
            pick("rows", bad, TABLE3_ROWS)
    assert pick("alphas", [0.0, 0.5], required=[0.0]) == [0.0, 0.5]       # valid None: any value
    with pytest.raises(ValueError, match="alphas must include 0.0"):
        pick("alphas", [0.5], required=[0.0])


@pytest.mark.parametrize("call, message", [
    (lambda: check_int("batch", 0), "batch must be a positive int, got 0"),
    (lambda: check_int("batch", True), "batch must be a positive int, got True"),
    (lambda: check_int("seed", -1, 0), "seed must be an int >= 0, got -1"),
    (lambda: check_int("central", 9, high=8), "central must be an int from 1 to 8, got 9"),
    (lambda: check_int("img_size", 0, 32, multiple=32, none=True),
     "img_size must be None or a positive multiple of 32, got 0"),
    (lambda: check_int("shown", 3, 2, multiple=2), "shown must be a positive multiple of 2, got 3"),
    (lambda: check_number("min_time", 0, above=0), "min_time must be a number > 0, got 0"),
    (lambda: check_number("f", 1.5, above=0, at_most=1), "f must be a number > 0 and <= 1, got 1.5"),
    (lambda: check_number("lr", "0.1", above=0), "lr must be a number > 0, got '0.1'"),
    (lambda: check_bool("finetune", 1), "finetune must be True or False, got 1"),
    (lambda: check_list("groups", [2, 2], low=2, distinct=True), "groups must be a non-empty list without repeats"),
    (lambda: check_list("groups", [2, 1], low=2), "groups\\[1\\] must be an int >= 2, got 1"),
    (lambda: check_list("batches", [1, 1], count=2), "batches must be a list of at least 2 different values"),
    (lambda: check_list("fractions", 0.3, check_number), "fractions must be a non-empty list, got 0.3"),
    (lambda: check_tuples("runs", [["S", 8], ["X", 1]], partial(check_choice, choices=("S", "B")), check_int),
     "unknown runs\\[1\\]\\[0\\] 'X'; valid choices: S, B"),
    (lambda: check_tuples("runs", [["S"]], check_int, check_int), "runs must be a non-empty list of lists of 2 values"),
    (lambda: check_prefix("resnet", "resnet18", "timm:"), "resnet must be a timm:\\* name, got 'resnet18'"),
])
def test_checks_say_what_is_expected_and_what_they_got(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_checks_return_what_they_accept():
    assert check_int("shown", None, none=True) is None and check_int("img_size", 64, 32, multiple=32) == 64
    assert check_list("groups", [], count=0) == [] and check_list("batches", (1, 2), count=2) == [1, 2]
    assert check_tuples("runs", (("S", 8),), partial(check_choice, choices=["S"]), check_int) == [["S", 8]]
    assert check_prefix("model", "mixer_B16", "mixer_") == "mixer_B16" and check_number("lr", 0.01, above=0) == 0.01


# --- the profile fields notebooks' defaults depend on ----------------------------------------------
@pytest.mark.parametrize("name", list(PROFILES))
def test_profile_fields_give_what_the_notebooks_chose_by_name(name):
    """Each field against the expression a notebook used before (by the profile's name)."""
    P = get_profile(name)
    for seeds in (None, 2, [0, 1]):   # ResMLP Tables 1 and 3: the costly rows' seeds
        assert (P.costly_seeds or seeds) == {"cpu": 1, "gpu": 3}.get(name, seeds)
    assert P.costly_seeds == {"cpu": 1, "gpu": 3}.get(name)                      # Mixer Table 3's L rows
    assert P.large_seeds == {"cpu": 2, "gpu": 3}.get(name)                       # and its B rows
    assert (["B", "L"] if P.on_gpu else ["B"]) == (["B"] if name in ("smoke", "cpu") else ["B", "L"])
    assert P.on_gpu == (name in ("gpu", "colab", "paper"))                                # Figure 4's measured batches
    assert P.quick == (name == "smoke")
    smoke = dict(img_size=16, patch_size=4, width_mult=0.125, depth_mult=0.25)   # what exact notebooks copied
    assert P.exact_scale == (smoke if name == "smoke" else {})
    assert P.exact_scale.get("img_size", 224) == (16 if name == "smoke" else 224)
    assert P.reduced == (P.patch_size is not None) and P.patch == (P.patch_size or 16)
    assert P.grid == (224 // 16 if P.patch_size is None else P.img_size // P.patch_size)
    assert P.finer_grid() == ({"patch_size": 14} if P.patch_size is None else {"img_size": P.img_size + P.patch_size})


def test_profile_geometry_at_each_profile():
    assert [(p.patch, p.grid, p.reduced) for p in PROFILES.values()] == \
        [(4, 4, True), (4, 8, True), (4, 8, True), (4, 8, True), (16, 14, False)]
    assert get_profile("paper").scale == {"img_size": 224} and get_profile("cpu").scale == \
        {"img_size": 32, "patch_size": 4, "width_mult": 0.125, "depth_mult": 0.5}


# --- the source an item records ------------------------------------------------------------------
@pytest.fixture
def no_session(monkeypatch, tmp_path):
    monkeypatch.delenv(NOTEBOOK_ENV, raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "results"))
    return tmp_path


def _saved_source(folder) -> str:
    save_item("resmlp", "Table 3", "reduced", profile="smoke", table=pd.DataFrame({"a": [1]}),
              verdict="inconclusive at this scale")
    return json.loads((folder / "results" / "resmlp" / "table3.reduced.json").read_text())["source"]


def test_source_is_the_runners_notebook(no_session, monkeypatch):
    monkeypatch.setenv(NOTEBOOK_ENV, "notebooks/resmlp/table3_ablations.ipynb")
    monkeypatch.setenv("JPY_SESSION_NAME", "/elsewhere/other.ipynb")          # the runner's wins
    assert _saved_source(no_session) == "notebooks/resmlp/table3_ablations.ipynb"


def test_source_given_explicitly_wins(no_session, monkeypatch):
    monkeypatch.setenv(NOTEBOOK_ENV, "notebooks/resmlp/table3_ablations.ipynb")
    save_item("resmlp", "Table 1", "exact", profile="smoke", source="src/vitmlp/exact.py")
    assert json.loads((no_session / "results" / "resmlp" / "table1.exact.json").read_text())["source"] \
        == "src/vitmlp/exact.py"


def test_source_of_a_notebook_run_by_hand_in_jupyter(no_session, monkeypatch):
    nb = REPO / "notebooks" / "resmlp" / "table3_ablations.ipynb"
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))                            # Jupyter Server: absolute
    assert _saved_source(no_session) == "notebooks/resmlp/table3_ablations.ipynb"
    monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/resmlp/table3_ablations.ipynb")   # server at the repo
    assert current_source() == "notebooks/resmlp/table3_ablations.ipynb"
    monkeypatch.chdir(nb.parent)                                               # server in the notebook's folder
    monkeypatch.setenv("JPY_SESSION_NAME", "table3_ablations.ipynb")
    assert current_source() == "notebooks/resmlp/table3_ablations.ipynb"
    monkeypatch.setenv("JPY_SESSION_NAME", str(no_session / "mine.ipynb"))    # outside the repository
    assert current_source() == str((no_session / "mine.ipynb").resolve())


def test_source_outside_any_notebook_is_an_interactive_session(no_session):
    assert current_source() == INTERACTIVE == "interactive session"
    assert _saved_source(no_session) == "interactive session"


def test_the_runner_tells_the_kernel_its_notebook_and_restores_the_environment(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(runner.pm, "execute_notebook", lambda *a, **k: seen.append(os.environ.get(NOTEBOOK_ENV)))
    monkeypatch.setenv(NOTEBOOK_ENV, "before")
    nb = REPO / "notebooks" / "resmlp" / "table3_ablations.ipynb"
    runner.kernel(nb, tmp_path / "out.ipynb", {"profile": "smoke"})
    assert seen == ["notebooks/resmlp/table3_ablations.ipynb"] == [notebook_path(nb)]
    assert os.environ[NOTEBOOK_ENV] == "before"
    monkeypatch.delenv(NOTEBOOK_ENV)
    runner.kernel(nb, tmp_path / "out.ipynb", {"profile": "smoke"})
    assert NOTEBOOK_ENV not in os.environ



def test_paper_epochs_keep_the_fraction_of_the_schedule():
    from vitmlp.profiles import get_profile, paper_epochs
    assert get_profile("paper").epochs == 300 and paper_epochs("paper", 5) == 5.0
    assert paper_epochs("smoke", 30) == 0.1 and paper_epochs("smoke", 50, of=100) == 0.5  # smoke: 1 epoch
    with pytest.raises(ValueError, match="epochs >= 0 and of > 0"):
        paper_epochs("smoke", -1)


def test_a_crash_sweep_multiplies_the_arms_lr_and_finds_the_first_failure():
    from vitmlp.experiment import Arm, crash_regime, crash_sweep, first_failure, sweep_epochs
    arm = Arm("patchify", "vit_S", {}, {"warmup_epochs": 0.5})
    runs = crash_sweep("smoke", arm, [4, 1, 2], seeds=2)
    assert [(label, c.lr, c.seed, c.warmup_epochs) for label, c in runs][:3] == \
        [("patchify ×1", 1e-3, 0, 0.5), ("patchify ×1", 1e-3, 1, 0.5), ("patchify ×2", 2e-3, 0, 0.5)]
    assert [c.lr for _, c in crash_sweep("smoke", arm)] == [1e-3, 128e-3]   # quick profile: the two ends
    with pytest.raises(ValueError, match="lr multipliers must be a list of at least 2 different values"):
        crash_sweep("smoke", arm, [2])
    # a sweep run is a probe: the first epochs that stand for the paper's first 50 of 300, lr on the whole schedule
    assert sweep_epochs("cpu") == 8 and sweep_epochs("paper") == 50 and sweep_epochs("smoke") is None
    cpu = crash_sweep("cpu", arm, [1, 2])
    assert {(c.stop_epoch, c.epochs) for _, c in cpu} == {(8, 48)} and runs[0][1].stop_epoch is None
    df = pd.DataFrame({"label": ["a ×1", "a ×2", "a ×2", "a ×4", "a ×8"],
                       "status": ["ok", "crash", "ok", "crash", "crash"], "final_top1": [70.0, None, 65.0, None, None]})
    assert first_failure(df) == 4.0 and first_failure(df[df.label == "a ×1"]) is None
    # a run that ends more than FAILED_POINTS (20) below the sweep's x1 run fails like a crash; 50.1 does not
    assert first_failure(df.assign(final_top1=[70.0, None, 49.9, None, None])) == 2.0
    assert first_failure(df.assign(final_top1=[70.0, None, 50.1, None, None])) == 4.0
    assert first_failure(df.assign(status="ok", final_top1=[70.0, 60.0, 10.0, 10.0, 9.0])) == 4.0
    # can this scale fail where the paper crashes (its crashing rate = x2 here)?
    assert crash_regime(df, 4) == ""
    assert crash_regime(df, 2) == "at this scale the a fails (crashes, or ends more than 20 points below its x1 run) " \
                                  "only from x4 the profile's lr, not at the paper's crashing rate (x2)"
    assert "the a fails (crashes, or ends more than 20 points below its x1 run) at no swept rate up to x2 the" in \
        crash_regime(df[df.label.isin(["a ×1", "a ×2"])], 2)


def test_a_paper_arm_keeps_the_papers_ratios_to_its_baseline_recipe_the_profiles_own():
    from vitmlp.experiment import paper_arm, plan
    from vitmlp.models.stems import SCALED_RELU_STEMS
    from vitmlp.profiles import run_config
    from vitmlp.records import config_hash
    a = paper_arm("cpu", "conv", {"stem": "volo"}, 1e-3, 20)   # the profile's lr 4e-3, warm-up 1 epoch; the stem 24 wide
    assert (a.model, a.model_options, a.overrides) == ("vit_S", {"stem": "volo", "stem_width": 24}, {"lr": 8e-3, "warmup_epochs": 4.0})
    assert paper_arm("cpu", "s", {}, 1e-4, 0, sam_rho=0.05).overrides == {"lr": 8e-4, "warmup_epochs": 0.0,
                                                                         "sam_rho": 0.05}
    # the paper's baseline row (patchify stem, 5e-4, 5 warm-up epochs) is the profile's own ViT-S run
    base = paper_arm("cpu", "baseline", SCALED_RELU_STEMS["1Proj"], 5e-4, 5)
    assert [config_hash(c) for _, c in plan("cpu", [base], [0, 1])] == \
        [config_hash(run_config("cpu", "vit_S", seed=s)) for s in (0, 1)]
    with pytest.raises(ValueError, match="lr must be a number > 0"):
        paper_arm("cpu", "x", {}, 0, 5)
