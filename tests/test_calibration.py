"""The convergence appendix's candidates and schedules: parsed exactly, bad ones refused."""
import pytest

from vitmlp.calibration import Candidate, candidate_runs, candidates, schedules
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


def test_schedules_are_multiples_of_the_profile_epochs():
    assert schedules(3, [1, 2, 16]) == (3, 6, 48)
    for bad in ([], [0], [1.5], [True]):
        with pytest.raises(ValueError, match="multiples of the profile's 3 epochs"):
            schedules(3, bad)
