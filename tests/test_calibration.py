"""The convergence appendix's candidates: parsed exactly, planned as cached runs, bad ones refused."""
import pytest

from vitmlp.calibration import Candidate, candidate_runs, candidates
from vitmlp.records import config_hash


def test_candidates_parse_and_plan_three_seeds_at_1x_and_2x():
    c, = candidates([[4e-3, 48, 0.8]])
    assert c == Candidate(4e-3, 48, 0.8) and c.label == "lr 0.004, 48 ep, difficulty 0.8"
    runs = candidate_runs("smoke", c, 0.125)
    assert len(runs) == 2 * 3 * 5          # 1x and 2x, 3 seeds, 4 baselines + the ResNet
    assert {cfg.epochs for _, cfg in runs} == {48, 96}
    assert all(cfg.lr == 4e-3 and cfg.dataset_options["difficulty"] == 0.8 for _, cfg in runs)
    assert len({config_hash(cfg) for _, cfg in runs}) == len(runs)


@pytest.mark.parametrize("bad", [[], [[4e-3, 16]], [[4e-3, 16.0, 0.7]], [[0, 16, 0.7]], [[4e-3, 16, 1.5]], "x"])
def test_a_bad_candidate_is_refused_with_an_example(bad):
    with pytest.raises(ValueError, match=r"e.g. \[\[4e-3, 48, 0.8\]\]"):
        candidates(bad)


def test_a_candidate_at_the_default_difficulty_is_the_sweeps_run():
    """No difficulty key at the data set's default: the same config (hash) as the sweep's run."""
    from vitmlp.calibration import sweep
    c, = candidates([[2e-3, 24, 0.5]])
    cand = {config_hash(cfg) for _, cfg in candidate_runs("smoke", c, 0.125, seeds=(0,))}
    plain = {config_hash(cfg) for _, cfg in sweep("smoke", (24, 48), widths=(0.125,), seeds=(0,), lr=2e-3,
                                                   precision="auto")}
    assert cand == plain and len(cand) == 10
    harder, = candidates([[2e-3, 24, 0.7]])
    assert not cand & {config_hash(cfg) for _, cfg in candidate_runs("smoke", harder, 0.125, seeds=(0,))}


def test_profile_point_is_the_profiles_own_candidate():
    from vitmlp.calibration import Candidate, profile_point
    from vitmlp.profiles import get_profile
    P = get_profile("cpu")
    assert profile_point("cpu") == Candidate(P.recipe["lr"], P.epochs, 0.5)   # the embedded set's default task
    with pytest.raises(ValueError, match="profile"):
        profile_point("nope")


def test_the_gpu_calibration_trains_the_lower_rates_first_then_the_profiles_own_runs():
    """2 rates x 3 seeds x 3 baselines, then the profile's point (5 seeds x 3, bag on seed 0), then
    each baseline at 2x: the point's configs are the profile's own (the runs a gpu page trains)."""
    from vitmlp.calibration import GPU_LRS, gpu_profile_runs
    from vitmlp.profiles import get_profile, run_config
    P = get_profile("gpu")
    runs = gpu_profile_runs()
    assert len(runs) == 18 + 16 + 3 and len({config_hash(c) for _, c in runs}) == 37
    assert [c.lr for _, c in runs[:18]] == [GPU_LRS[0]] * 9 + [GPU_LRS[1]] * 9
    point = runs[18:34]
    assert {c.lr for _, c in point} == {P.recipe["lr"]} and {c.epochs for _, c in point} == {P.epochs}
    vit0 = next(c for label, c in point if label == "ViT-S" and c.seed == 0)
    assert config_hash(vit0) == config_hash(run_config("gpu", "vit_S", seed=0))
    assert [(c.epochs, c.seed) for _, c in runs[34:]] == [(2 * P.epochs, 0)] * 3


def test_the_sgd_sweep_changes_only_the_optimiser_of_the_profiles_resmlp():
    """ResNet's SGD (momentum 0.9, weight decay 1e-4) at 1, 2, 4, 8 x its rule (0.05 at batch 128),
    seed by seed; every other field is the profile's reduced ResMLP-S12 run."""
    from vitmlp.calibration import SGD_FACTORS, sgd_runs
    from vitmlp.profiles import run_config
    runs = sgd_runs("cpu")
    assert [(c.seed, c.lr) for _, c in runs] == [(s, f * 0.05) for s in (0, 1) for f in SGD_FACTORS]
    assert runs[1][0] == "SGD lr 0.1 (x2 ResNet's rule)"
    base = run_config("cpu", "resmlp_S12", seed=0).to_dict()
    changed = {k for k, v in runs[0][1].to_dict().items() if base[k] != v}
    assert changed == {"optimizer", "lr", "weight_decay"} and runs[0][1].optimizer == "momentum"
    assert runs[0][1].weight_decay == 1e-4


def test_the_profiles_sgd_rate_is_a_swept_multiple_of_resnets_rule():
    """ResMLP's SGD rows (Table 3's old-fashioned, D.1) train at the profile's rate, one the appendix's
    sweep measured; without a profile (the fine-tunes) and where none is set, ResNet's rule as written."""
    from vitmlp.calibration import SGD_FACTORS
    from vitmlp.profiles import SGD_LR_SCALE, resnet_recipe, sgd_recipe
    assert SGD_LR_SCALE["cpu"] in SGD_FACTORS
    assert sgd_recipe(128)["lr"] == 0.05 and sgd_recipe(128, "smoke")["lr"] == 0.05
    assert sgd_recipe(128, "cpu")["lr"] == SGD_LR_SCALE["cpu"] * 0.05 == resnet_recipe("cpu")["lr"]
    assert sgd_recipe(32, "cpu")["lr"] == SGD_LR_SCALE["cpu"] * 0.0125   # linear in the batch, as ResNet's rule


def test_the_old_fashioned_recipe_warms_up_only_at_a_multiple_of_resnets_rate():
    """At ResNet's own rate (gpu: no multiple) no warm-up, as ResNet; at the cpu profile's multiple its warm-up.
    The appendix's pair is Table 3's cached old-fashioned run beside the same run without warm-up."""
    from vitmlp.calibration import resnet_warmup_runs
    from vitmlp.experiment import Arm, plan
    from vitmlp.profiles import get_profile, resnet_recipe
    from vitmlp.records import config_hash
    assert get_profile("gpu").recipe["warmup_epochs"] == 1.0 and resnet_recipe("gpu")["warmup_epochs"] == 0.0
    assert resnet_recipe("cpu")["warmup_epochs"] == get_profile("cpu").recipe["warmup_epochs"] == 1.0
    runs = resnet_warmup_runs("cpu")
    assert [(c.warmup_epochs, c.seed) for _, c in runs] == [(w, s) for w in (0.0, 1.0) for s in (0, 1, 2)]
    table3 = plan("cpu", [Arm("old-fashioned", "resmlp_S12", {}, resnet_recipe("cpu"))], 3)
    assert [config_hash(c) for _, c in runs[3:]] == [config_hash(c) for _, c in table3]
