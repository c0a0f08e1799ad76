"""Verdict statistics on constructed data: Welch intervals, equivalence, "did not train", the
minimal detectable effect and Holm's correction (vitmlp.stats)."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from vitmlp import stats
from vitmlp.plots import plot_pairs
from vitmlp.stats import beyond_noise, compare


def verdict(*args, **kwargs) -> str:
    return stats.row_verdict(*args, **kwargs)["verdict"]

BASE = [76.0, 76.5, 75.5]


def test_welch_interval_matches_scipy():
    a, b = [80.0, 81.0, 82.0, 80.5], [70.0, 72.0, 71.0]
    d = stats.welch(a, b)
    t = st.ttest_ind(b, a, equal_var=False)
    assert d.delta == pytest.approx(np.mean(b) - np.mean(a))
    assert d.delta / d.se == pytest.approx(t.statistic)
    assert 2 * min(d.p_greater(), d.p_less()) == pytest.approx(t.pvalue)
    ci = t.confidence_interval(0.95)
    assert (d.lo, d.hi) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert math.isnan(stats.welch([80.0], [70.0, 71.0]).lo)         # one seed: no interval


def test_welch_from_printed_summaries():
    """A paper's "mean +- std over n runs" gives the same interval as the runs themselves."""
    a, b = [80.0, 81.0, 82.0, 80.5], [70.0, 72.0, 71.0]
    d, s = stats.welch(a, b), stats.welch_from_stats(np.mean(a), np.std(a, ddof=1), 4, np.mean(b), np.std(b, ddof=1), 3)
    assert (s.delta, s.lo, s.hi, s.dof) == (pytest.approx(d.delta), pytest.approx(d.lo), pytest.approx(d.hi),
                                            pytest.approx(d.dof))
    t = st.ttest_ind_from_stats(82.54, 0.09, 5, 82.20, 0.06, 5, equal_var=False)
    p = stats.welch_from_stats(82.20, 0.06, 5, 82.54, 0.09, 5)
    assert p.delta / p.se == pytest.approx(t.statistic) and p.lo > 0
    assert math.isnan(stats.welch_from_stats(82.2, 0.06, 5, 82.5, math.nan, 1).lo)   # one run: no interval


def test_directional_rows():
    assert verdict(-20.1, BASE, [56.0, 57.0, 55.0]) == "reproduced"
    assert verdict(+0.9, BASE, [70.0, 71.0, 69.0]) == "not reproduced"      # clearly the wrong sign
    assert verdict(+0.9, BASE, [76.2, 76.9, 75.4]) == "inconclusive at this scale"
    assert verdict(-20.1, [76.0], [56.0]) == "inconclusive at this scale"   # one seed each: no firm verdict
    # z = 2 would call this a difference; Welch's t with ~2 degrees of freedom does not
    a, b = [70.0, 72.0], [73.5, 75.5]
    assert abs(np.mean(b) - np.mean(a)) > 2 * math.sqrt(np.var(a, ddof=1) / 2 + np.var(b, ddof=1) / 2)
    assert not beyond_noise(a, b)
    big = stats.row_verdict(+0.7, BASE, [96.0, 97.0, 96.5])
    assert big["verdict"] == "reproduced" and "the paper's effect" in big["why"]    # 29x the paper's: said


def test_about_the_same_needs_a_tight_interval():
    huge_noise = [60.0, 90.0, 76.0]
    assert verdict(-0.3, BASE, huge_noise) == "inconclusive at this scale"          # low power is no evidence
    tight = [76.1, 76.2, 76.0, 76.15, 76.05]
    base = [76.0, 76.1, 75.95, 76.05, 76.0]
    assert verdict(-0.3, base, tight, margin=1.0) == "reproduced"
    assert verdict(-0.3, base, [78.5, 78.6, 78.4, 78.55, 78.45], margin=1.0) == "not reproduced"


def test_rows_at_chance_did_not_train():
    at_chance = [10.2, 9.8, 10.4]
    v = stats.row_verdict(-5.0, [9.9, 10.1, 10.0], at_chance, chance=10.0)
    assert v["verdict"] == "inconclusive at this scale" and "did not train" in v["why"]
    assert stats.did_not_train([14.0, 14.5], chance=10.0) and not stats.did_not_train([16.0], chance=10.0)


def test_a_row_whose_train_loss_stalled_did_not_train():
    # 20 % is 10 points above chance, but a train loss that fell 2.31 -> 2.18 (6 %) never learned the task
    # (reduced ResMLP-S12 under SGD); a healthy run falls from 2.3 to 1.3
    def runs(label, top1, first, last):
        return pd.DataFrame({"label": label, "seed": [0, 1, 2], "status": "ok", "num_classes": 10,
                             "final_top1": top1, "curves": [{"train_loss": [first, (first + last) / 2, last]}] * 3})
    df = pd.concat([runs("base", [94.0, 93.0, 93.5], 2.30, 1.30), runs("sgd", [19.0, 21.0, 20.0], 2.31, 2.18),
                    runs("fine", [95.0, 94.5, 95.5], 2.30, 1.25)], ignore_index=True)
    assert stats.loss_fall({"train_loss": [2.31, 2.2, 2.18]}) == pytest.approx(0.13 / 2.31)
    assert math.isnan(stats.loss_fall({"train_loss": [2.3]}))        # one epoch: no fall to read
    t = compare(df, {"base": 79.4, "sgd": 75.9, "fine": 80.0}, "base", numbers=True).set_index("row")
    assert t.loc["sgd", "verdict"] == stats.INCONCLUSIVE
    assert t.loc["sgd", "why"] == "did not train (train loss ended less than 10 % below its first epoch's: sgd 6 %)"
    assert t.loc["fine", "verdict"] == stats.REPRODUCED    # judged on its interval
    assert stats.stalled(df, ["base", "fine"]) is None
    assert list(t.columns[-len(stats.NUMBERS):]) == stats.NUMBERS
    # per run: the sgd runs by their loss, a run at chance by its top-1, a run without curves by its top-1 alone
    per_run = pd.concat([df, pd.DataFrame({"label": ["dead", "old"], "final_top1": [12.0, 60.0], "curves": [{}, {}]})])
    assert stats.untrained_runs(per_run, 10.0).tolist() == [False] * 3 + [True] * 3 + [False] * 3 + [True, False]
    # a stalled baseline takes every row with it
    assert compare(df, {"sgd": 75.9, "fine": 80.0}, "sgd").set_index("row").loc["fine", "why"].startswith(
        "did not train")
    assert stats.seed_differences(df, "base", "sgd", "d").empty and len(stats.seed_differences(df, "base", "fine", "d")) == 3


def test_a_row_that_did_not_train_yet_still_rose_says_its_plateau_check_is_pending():
    # Scaled ReLU Table 7's 10 % row: near chance at the profile's epochs, but rising, and its
    # comparison waits for the other row's 2x runs: the reader learns a longer schedule may settle it
    def runs(label, curve):
        return pd.DataFrame({"label": label, "seed": [0, 1, 2], "status": "ok", "num_classes": 10, "epochs": 8,
                             "final_top1": curve[-1], "curves": [{"val_top1": curve, "train_loss": [2.3, 1.5]}] * 3})
    df = pd.concat([runs("100 %", [50.0] * 5 + [60.0, 70.0, 80.0]), runs("10 %", [10.0] * 6 + [12.0, 14.0])],
                   ignore_index=True)
    t = compare(df, {"10 %": 70.0, "100 %": 80.0}, "10 %").set_index("row")
    assert t.loc["100 %", "verdict"] == stats.INCONCLUSIVE
    assert t.loc["100 %", "why"] == ("did not train (within 5 points of chance, 10 %); not at the plateau: "
                                     "10 % still rose +4.0 points over the last quarter of its epochs (more than 2); "
                                     "the 2x-epochs check has 0 of 3 runs; 100 % still rose +20.0 points over the "
                                     "last quarter of its epochs (more than 2); the 2x-epochs check has 0 of 3 runs")


def test_a_row_without_recorded_runs_is_not_called_untrained():
    v = stats.row_verdict(1.0, [97.0, 97.5, 98.0], [], chance=10.0)   # read with missing="skip" before it trained
    assert v["verdict"] == stats.INCONCLUSIVE and v["why"] == "no recorded run"


def test_the_chance_level_comes_from_the_runs_class_count():
    runs = pd.DataFrame({"final_top1": [50.0, 60.0], "num_classes": [None, 20]})   # a crash has no count
    assert stats.chance_level(runs) == 5.0
    assert stats.chance_level(runs, "final_loss") is None                    # not a top-1
    assert stats.chance_level(runs[["final_top1"]]) is None                  # differences of runs


def test_a_run_still_rising_at_its_end_is_seen_from_its_curve():
    rising = {"val_top1": [10.0 + 2 * e for e in range(8)]}      # +2 points each of 8 epochs
    flat = {"val_top1": [50.0, 70.0, 80.0, 85.0, 86.0, 86.5, 86.5, 86.6]}
    gains = stats.late_gain(pd.DataFrame({"curves": [rising, flat, {"val_top1": [None]}]}))
    assert gains.iloc[:2].tolist() == pytest.approx([4.0, 0.1])  # epochs 6 -> 8 of 8: the last quarter
    assert math.isnan(gains.iloc[2]) and (gains.iloc[:2] > stats.PLATEAU_POINTS).tolist() == [True, False]


def test_a_row_not_at_its_plateau_gets_no_firm_verdict():
    base, other = [80.0, 80.5, 79.5], [60.0, 60.5, 59.5]     # a clear 20-point drop
    assert stats.row_verdict(-1.0, base, other)["verdict"] == stats.REPRODUCED
    v = stats.judged(-1.0, base, other, unsettled="still rose +3.0 points")
    assert v["verdict"] == stats.INCONCLUSIVE and v["why"] == "not at the plateau: still rose +3.0 points"
    assert v["95% CI"] == "[-21.1, -18.9]"                    # the interval is still shown


def test_a_no_better_or_same_claim_at_the_ceiling_is_not_reproduced_by_agreement():
    """Mixer A.1 at the cpu profile: tied 99.4 %, untied 99.95 %. "No gain beyond +1 point" cannot
    fail when the baseline leaves less than a point of room; a loss beyond the margin still refutes."""
    tied, untied = [99.3, 99.45, 99.45], [99.95, 99.9, 100.0]
    v = stats.row_verdict(stats.NOT_HIGHER, tied, untied, margin=1.0, chance=10.0)
    assert v["verdict"] == stats.INCONCLUSIVE and "at the ceiling" in v["why"] and "+0.60 points" in v["why"]
    assert stats.row_verdict(stats.NOT_HIGHER, tied, [99.4, 99.35, 99.45], margin=0.5,   # room 0.6 > 0.5
                             chance=10.0)["verdict"] == stats.REPRODUCED
    assert stats.row_verdict(stats.NOT_HIGHER, tied, untied, margin=1.0)["verdict"] == stats.REPRODUCED  # no top-1
    same = stats.row_verdict(0.0, tied, [99.35, 99.4, 99.5], margin=1.0, chance=10.0)
    assert same["verdict"] == stats.INCONCLUSIVE and "at the ceiling" in same["why"]
    lost = stats.row_verdict(0.0, tied, [96.0, 96.2, 95.9], margin=1.0, chance=10.0)
    assert lost["verdict"] == stats.NOT_REPRODUCED
    assert stats.row_verdict(0.0, [90.0, 90.1, 89.9], [90.05, 90.0, 90.1], chance=10.0)["verdict"] == stats.REPRODUCED


def test_mde_shrinks_with_seeds():
    assert stats.mde(1.0, 3) > stats.mde(1.0, 5) > stats.mde(1.0, 10) > 1.0
    # large n: (z_.975 + z_.8) * sqrt(2/n) * std
    assert stats.mde(1.0, 2000) == pytest.approx((1.96 + 0.8416) * math.sqrt(2 / 2000), rel=0.01)
    assert math.isnan(stats.mde(1.0, 1))


def test_holm_changes_a_borderline_item_verdict():
    assert stats.holm([0.01, 0.04, 0.03]).tolist() == [True, False, False]   # 0.01 < 0.05/3; 0.03 > 0.05/2
    assert stats.holm([0.01, 0.02, 0.03]).tolist() == [True, True, True]
    rows = pd.DataFrame({"verdict": ["reproduced"] * 3, "p_paper": [0.01, 0.04, 0.03], "p_other": [0.9] * 3})
    assert stats.item_verdict(rows.verdict.tolist()) == "reproduced"          # uncorrected: every row holds
    assert stats.item_verdict(rows) == "inconclusive at this scale"           # Holm: two rows no longer do
    one_bad = pd.DataFrame({"verdict": ["reproduced"] * 13 + ["not reproduced"],
                            "p_paper": [1e-4] * 13 + [0.99], "p_other": [0.99] * 13 + [0.02]})
    assert stats.item_verdict(one_bad.verdict.tolist()) == "not reproduced"
    assert stats.item_verdict(one_bad) == "inconclusive at this scale"        # 0.02 > 0.05/14


def test_compare_reports_interval_mde_and_reason():
    df = pd.DataFrame({"label": ["base"] * 3 + ["worse"] * 3 + ["chance"] * 3, "status": "ok", "num_classes": 10,
                       "final_top1": BASE + [56.0, 57.0, 55.0] + [10.5, 9.5, 11.0]})
    t = compare(df, {"base": 76.0, "worse": 56.0, "chance": 70.0}, base="base").set_index("row")
    assert t.loc["worse", "verdict"] == "reproduced" and t.loc["worse", "95% CI"].startswith("[-2")
    assert t.loc["worse", "MDE"] > 0
    assert t.loc["chance", "verdict"] == "inconclusive at this scale" and "did not train" in t.loc["chance", "why"]
    assert stats.counts(t[t.index != "base"]) == "1 reproduced, 1 inconclusive at this scale (of 2 rows)"
    assert stats.counts(t) == stats.counts(t[t.index != "base"])   # the baseline row makes no claim


def test_a_table_whose_every_row_holds_is_reproduced_beside_its_baseline_row():
    df = pd.DataFrame({"label": ["base"] * 3 + ["worse"] * 3, "status": "ok", "num_classes": 10,
                       "final_top1": BASE + [56.0, 57.0, 55.0]})
    t = compare(df, {"base": 76.0, "worse": 56.0}, base="base")
    assert t.verdict.tolist() == [stats.BASELINE, stats.REPRODUCED]
    assert stats.item_verdict(t) == stats.REPRODUCED


def _runs(label, finals, gain, epochs=8):
    """Runs of ``label`` whose val top-1 curves end at ``finals`` after rising ``gain`` over the last quarter."""
    curve = lambda f: {"val_top1": [f - 30.0, f - 10.0] + [f - gain] * (epochs - 4) + [f - gain / 2, f]}
    return pd.DataFrame({"label": label, "status": "ok", "num_classes": 10, "final_top1": finals, "schedule": epochs,
                         "curves": [curve(f) for f in finals]})


def test_compare_reads_a_row_still_rising_from_its_2x_runs_or_leaves_it_inconclusive():
    df = pd.concat([_runs("base", [80.0, 80.5, 79.5], 0.5), _runs("bag", [55.0, 56.0, 54.0], 3.0)])
    assert stats.rising(df) == ["bag"]
    paper = {"base": 76.6, "bag": 56.5}
    t = compare(df, paper, "base").set_index("row")
    assert t.loc["bag", "verdict"] == stats.INCONCLUSIVE and t.loc["bag", "why"] == (
        "not at the plateau: bag still rose +3.0 points over the last quarter of its epochs (more than 2); "
        "the 2x-epochs check has 0 of 3 runs")
    assert t.loc["bag", "95% CI"] != ""                                   # the interval is still shown
    bag_2x = _runs("bag", [60.0, 61.0, 59.0], 1.0, epochs=16)
    half = compare(df, paper, "base", doubled=bag_2x).set_index("row")   # one schedule per comparison
    assert half.loc["bag", "verdict"] == stats.INCONCLUSIVE and half.loc["bag", "why"].startswith(
        "not at the plateau: bag is read at 2x epochs, so base is too (one schedule per comparison): its 2x-epochs runs number 0 of 3")
    settled = compare(df, paper, "base", doubled=pd.concat([bag_2x, _runs("base", [81.0, 81.5, 80.5], 0.5, epochs=16)])).set_index("row")
    assert settled.loc["bag", "verdict"] == stats.REPRODUCED and settled.loc["bag", "ours"] == 60.0
    assert settled.loc["bag", "ours Δ"] == -21.0                           # against the baseline at 2x as well
    assert settled.loc["base", "ours"] == 80.0 and settled.loc["base", "why"] == (   # its row: the profile's epochs
        "at 2x epochs 81.00 ± 0.50 (3 seeds): what the rows read at 2x compare with")
    assert t.loc["base", "why"] == ""
    assert settled.loc["bag", "why"].endswith("; read at 2x epochs (bag: the profile's epochs still rose +3.0; at 2x +1.0; "
                                              "base: level at the profile's epochs (+0.5), read at 2x beside bag; at 2x +0.5)")
    still = compare(df, paper, "base", doubled=_runs("bag", [60.0, 61.0, 59.0], 2.5, epochs=16)).set_index("row")
    assert still.loc["bag", "verdict"] == stats.INCONCLUSIVE and still.loc["bag", "why"].endswith(
        "at 2x epochs still +2.5; the 4x-epochs check has 0 of 3 runs")   # on to 4x
    late_base = pd.concat([_runs("base", [80.0, 80.5, 79.5], 2.5), _runs("x", [70.0, 70.5, 69.5], 0.0)])
    t = compare(late_base, {"base": 76.6, "x": 70.0}, "base").set_index("row")
    assert t.loc["x", "verdict"] == stats.INCONCLUSIVE and "base still rose +2.5" in t.loc["x", "why"]
    base_2x = _runs("base", [82.0, 82.5, 81.5], 0.5, epochs=16)
    alone = compare(late_base, {"base": 76.6, "x": 70.0}, "base", doubled=base_2x).set_index("row")
    assert alone.loc["x", "verdict"] == stats.INCONCLUSIVE and "its 2x-epochs runs number 0 of 3" in alone.loc["x", "why"]
    both = compare(late_base, {"base": 76.6, "x": 70.0}, "base",
                   doubled=pd.concat([base_2x, _runs("x", [72.0, 72.5, 71.5], 0.0, epochs=16)])).set_index("row")
    assert both.loc["x", "ours Δ"] == -10.0   # both rows at twice the epochs
    assert both.loc["base", "ours"] == 82.0 and both.loc["base", "why"] == ""   # its own row is read at 2x: nothing to add
    assert both.loc["x", "why"].endswith("read at 2x epochs (base: the profile's epochs still rose +2.5; at 2x +0.5; "
                                         "x: level at the profile's epochs (+0.0), read at 2x beside base; at 2x +0.0)")
    schedules = compare(df, paper, "base", own_schedule=["bag"]).set_index("row")   # its schedule is the claim
    assert schedules.loc["bag", "verdict"] == stats.REPRODUCED
    one_seed = compare(pd.concat([df, _runs("big", [90.0], 5.0)]), {**paper, "big": 81.0}, "base").set_index("row")
    assert one_seed.loc["big", "why"].startswith("fewer than 2 seeds: no interval; not at the plateau: ")   # both said
    assert "big still rose +5.0" in one_seed.loc["big", "why"]


def test_a_claim_reads_each_of_its_rows_at_its_plateau_from_its_2x_runs_where_it_still_rose():
    # Mixer Figure 4's third claim: the drops of two global-shuffle rows, Mixer's still rising
    df = pd.concat([_runs("mixer", [60.0, 61.0, 59.0], 2.9), _runs("resnet", [90.0, 90.5, 89.5], 0.9)])
    def top1(read, label):
        return read[read.label == label].final_top1.tolist()
    read, why, reads = stats.at_plateau(df, ["resnet"])
    assert top1(read, "resnet") == [90.0, 90.5, 89.5] and why is None and reads == {}   # at its plateau
    assert top1(read, "mixer") == []   # a row the claim does not read
    read, why, reads = stats.at_plateau(df, ["mixer", "resnet"], _runs("mixer", [70.0, 71.0], 1.0, epochs=16))
    assert reads == {} and top1(read, "mixer") == [60.0, 61.0, 59.0] and why == (
        "mixer still rose +2.9 points over the last quarter of its epochs (more than 2); the 2x-epochs check has 2 of 3 runs")
    mixer_2x = _runs("mixer", [70.0, 71.0, 69.0], 1.3, epochs=16)
    _, why, _ = stats.at_plateau(df, ["mixer", "resnet"], mixer_2x)   # resnet level, but compared with a row read at 2x
    assert why == "mixer is read at 2x epochs, so resnet is too (one schedule per comparison): its 2x-epochs runs number 0 of 3"
    read, why, reads = stats.at_plateau(df, ["mixer", "resnet"], pd.concat([mixer_2x, _runs("resnet", [91.0, 91.0, 90.0], 0.9, epochs=16)]))
    assert why is None and reads == {"mixer": "the profile's epochs still rose +2.9; at 2x +1.3",
                                     "resnet": "level at the profile's epochs (+0.9), read at 2x beside mixer; at 2x +0.9"}
    assert top1(read, "mixer") == [70.0, 71.0, 69.0] and top1(read, "resnet") == [91.0, 91.0, 90.0]
    _, why, _ = stats.at_plateau(df, ["mixer", "resnet"], mixer_2x, own_schedule=["resnet"])   # resnet's schedule is its claim
    assert why is None
    _, why, reads = stats.at_plateau(df, ["mixer", "resnet"], _runs("mixer", [70.0, 71.0, 69.0], 2.4, epochs=16))
    assert reads == {} and why.endswith("(more than 2); at 2x epochs still +2.4; the 4x-epochs check has 0 of 3 runs")


def test_a_row_still_rising_at_2x_climbs_to_4x_and_8x_with_the_rows_it_is_compared_with():
    # Scaled ReLU Table 7: the 10 % row still rose +6.5 at twice the epochs
    df = pd.concat([_runs("10 %", [55.0, 56.0, 54.0], 6.0), _runs("100 %", [90.0, 90.5, 89.5], 1.5)])
    twins = lambda lab, d, finals, gain: _runs(lab, finals, gain, epochs=8 * 2 ** d)   # noqa: E731
    small = [twins("10 %", 1, [60.0, 61.0, 59.0], 5.0), twins("10 %", 2, [64.0, 65.0, 63.0], 1.0)]
    large = [twins("100 %", 1, [91.0, 91.5, 90.5], 0.5)]
    read, why, reads = stats.at_plateau(df, ["10 %", "100 %"], pd.concat(small + large))
    assert why == ("10 % is read at 4x epochs, so 100 % is too (one schedule per comparison): its 4x-epochs runs number 0 of 3")
    large.append(twins("100 %", 2, [92.0, 92.5, 91.5], 0.5))
    read, why, reads = stats.at_plateau(df, ["10 %", "100 %"], pd.concat(small + large))
    assert why is None and reads == {"10 %": "the profile's epochs still rose +6.0; at 2x +5.0; at 4x +1.0",
                                     "100 %": "level at the profile's epochs (+1.5); at 2x +0.5, read at 4x beside 10 %; at 4x +0.5"}
    assert read[read.label == "10 %"].final_top1.tolist() == [64.0, 65.0, 63.0]   # both at 4x, not at 2x
    assert read[read.label == "100 %"].final_top1.tolist() == [92.0, 92.5, 91.5]
    t = compare(df, {"10 %": 67.8, "100 %": 81.6}, base="10 %", doubled=pd.concat(small + large)).set_index("row")
    assert t.loc["100 %", "ours Δ"] == 28.0 and t.loc["100 %", "why"].endswith(
        "; read at 4x epochs (10 %: the profile's epochs still rose +6.0; at 2x +5.0; at 4x +1.0; 100 %: level at the "
        "profile's epochs (+1.5); at 2x +0.5, read at 4x beside 10 %; at 4x +0.5)")
    assert t.loc["10 %", "why"] == ""   # its own row is read at 4x
    # 100 %, level at 2x, has no 4x runs (plateau_twins plans none while 10 % climbs): read at 8x beside it
    climb = [small[0], twins("10 %", 2, [64.0, 65.0, 63.0], 3.0), twins("10 %", 3, [66.0, 67.0, 65.0], 1.0)]
    _, why, _ = stats.at_plateau(df, ["10 %", "100 %"], pd.concat(climb + large[:1]))
    assert why == "10 % is read at 8x epochs, so 100 % is too (one schedule per comparison): its 8x-epochs runs number 0 of 3"
    read, why, reads = stats.at_plateau(df, ["10 %", "100 %"],
                                        pd.concat(climb + large[:1] + [twins("100 %", 3, [93.0, 93.5, 92.5], 0.5)]))
    assert why is None and reads == {"10 %": "the profile's epochs still rose +6.0; at 2x +5.0; at 4x +3.0; at 8x +1.0",
                                     "100 %": "level at the profile's epochs (+1.5); at 2x +0.5, read at 8x beside 10 %; at 8x +0.5"}
    assert read[read.label == "100 %"].final_top1.tolist() == [93.0, 93.5, 92.5]
    still = [twins("10 %", d, [60.0 + d, 61.0 + d, 59.0 + d], 3.0) for d in (1, 2, 3)]
    _, why, reads = stats.at_plateau(df, ["10 %", "100 %"], pd.concat(still))
    assert reads == {} and why == ("10 % still rose +6.0 points over the last quarter of its epochs (more than 2); at 2x "
                                   "epochs still +3.0; at 4x epochs still +3.0; at 8x epochs still +3.0 (the check "
                                   "doubles at most 3 times)")
    # a row level at the profile's epochs that rises at 2x takes the comparison on to 4x
    _, why, _ = stats.at_plateau(df, ["10 %", "100 %"], pd.concat([twins("10 %", 1, [60.0, 61.0, 59.0], 1.0),
                                                                  twins("100 %", 1, [91.0, 91.5, 90.5], 2.5)]))
    assert why == ("100 % was level at the profile's epochs (+1.5); at 2x epochs still +2.5; the 4x-epochs check has 0 of 3 runs")


def test_a_row_level_over_its_last_quarter_that_twice_the_epochs_still_raised_is_read_at_2x():
    # Three Things Table 7: the Linear stem rose +1.7 over its last quarter of 48 epochs, then gained +4.3 at 96
    df = pd.concat([_runs("linear", [95.0, 95.5, 96.0], 0.3), _runs("levit", [97.0, 97.5, 97.0], 0.5)])
    linear_2x = _runs("linear", [99.5, 99.0, 100.0], 0.2, epochs=16)
    assert stats.rising(df) == [] and stats.rising(df, longer=linear_2x) == ["linear"]
    assert stats.rising(df, longer=linear_2x.iloc[:2]) == []   # 2 of its 3 runs: no doubling gain yet
    read, why, reads = stats.at_plateau(df, ["linear", "levit"], linear_2x.iloc[:2])
    assert why is None and reads == {} and read[read.label == "linear"].final_top1.tolist() == [95.0, 95.5, 96.0]
    _, why, _ = stats.at_plateau(df, ["linear", "levit"], linear_2x)
    assert why == "linear is read at 2x epochs, so levit is too (one schedule per comparison): its 2x-epochs runs number 0 of 3"
    both = pd.concat([linear_2x, _runs("levit", [98.5, 99.0, 98.5], 0.1, epochs=16)])   # levit: +1.3, level
    read, why, reads = stats.at_plateau(df, ["linear", "levit"], both)
    assert why is None and reads == {
        "linear": "level at the profile's epochs (+0.3) but 2x epochs added +4.0 (more than 2); at 2x +0.2",
        "levit": "level at the profile's epochs (+0.5), read at 2x beside linear; at 2x +0.1"}
    assert read[read.label == "linear"].final_top1.tolist() == [99.5, 99.0, 100.0]
    t = compare(df, {"linear": 71.9, "levit": 72.2}, base="linear", doubled=both).set_index("row")
    assert t.loc["levit", "ours Δ"] == pytest.approx(-0.83) and "read at 2x epochs" in t.loc["levit", "why"]
    just = pd.concat([linear_2x, _runs("levit", [99.2, 99.6, 98.8], 0.1, epochs=16)])   # levit: +2.03, just above 2
    assert stats.at_plateau(df, ["linear", "levit"], just)[2]["levit"] == (
        "level at the profile's epochs (+0.5) but 2x epochs added +2.03 (more than 2); at 2x +0.1")   # not "+2.0 (more than 2)"
    # its 4x runs gained +3 more: it climbs on, and the pair waits for levit's 4x runs
    _, why, _ = stats.at_plateau(df, ["linear", "levit"], pd.concat([both, _runs("linear", [102.5, 102.0, 103.0], 0.1, epochs=32)]))
    assert why == "linear is read at 4x epochs, so levit is too (one schedule per comparison): its 4x-epochs runs number 0 of 3"


def test_compare_judges_the_texts_no_better_claim_beside_the_printed_difference():
    # Scaled ReLU Table 3: "(2,2,2,2) is not better than (2,1,1,8)", printed 81.0 vs 81.9
    df = pd.DataFrame({"label": ["a"] * 3 + ["b"] * 3, "status": "ok", "num_classes": 10,
                       "final_top1": [60.0, 61.0, 60.5, 60.2, 60.9, 60.4]})
    t = compare(df, {"a": 81.9, "b": 81.0}, base="a", claim=stats.NOT_HIGHER).set_index("row")
    assert t.loc["b", "paper Δ"] == -0.9 and t.loc["b", "verdict"] == stats.REPRODUCED
    assert "below +1" in t.loc["b", "why"]
    directional = compare(df, {"a": 81.9, "b": 81.0}, base="a").set_index("row")   # -0.9 read as "lower"
    assert directional.loc["b", "verdict"] == stats.INCONCLUSIVE
    with pytest.raises(ValueError, match="unknown claim 'lower'"):
        compare(df, {"a": 81.9, "b": 81.0}, base="a", claim="lower")


def test_an_analysis_of_weights_that_did_not_move_gives_no_verdict():
    # ResMLP Figure 3 at the 3-epoch profile: sparsity 15.7 % trained vs 14.8 % at init, seeds spread ~1
    v = stats.analysis_verdict(True, [15.7, 14.2, 16.9], [14.8, 15.6, 13.9], "sparsity (%)")
    assert v["verdict"] == stats.INCONCLUSIVE and "did not move" in v["why"] and "at init 14.8" in v["why"]
    moved = stats.analysis_verdict(True, [41.0, 42.5, 40.2], [14.8, 15.6, 13.9], "sparsity (%)")
    assert moved["verdict"] == stats.REPRODUCED and moved["ci_lo"] > 0
    assert stats.analysis_verdict(False, [41.0, 42.5, 40.2], [14.8, 15.6, 13.9], "x")["verdict"] == stats.NOT_REPRODUCED
    assert stats.analysis_verdict(True, [41.0], [14.8], "x")["verdict"] == stats.INCONCLUSIVE   # one seed
    # the smallest move its seeds detect, from the pooled spread: here both arms spread by exactly 1
    assert stats.analysis_verdict(True, [41.0, 42.0, 43.0], [14.0, 15.0, 16.0], "x")["MDE"] == stats.mde(1.0, 3)
    assert math.isnan(stats.analysis_verdict(True, [41.0], [14.8], "x")["MDE"])
    # a quantity constant at initialisation (DPN's scales are all 1): the test has the trained seeds' dof
    # only, and the MDE stays above the interval's half-width (a pooled MDE, 3.72 se, fell below 4.30 se)
    const = stats.analysis_verdict(True, [0.1, 0.2, 0.3], [0.0, 0.0, 0.0], "x")
    assert const["MDE"] > (const["ci_hi"] - const["ci_lo"]) / 2 > 0
    # weights that moved, read from runs of which one group stayed at chance: no verdict, and why
    untrained = stats.analysis_verdict(True, [41.0, 42.5, 40.2], [14.8, 15.6, 13.9], "x", top1=[[90.0, 91.0], [11.0, 12.0]],
                                       chance=10.0)
    assert untrained["verdict"] == stats.INCONCLUSIVE and untrained["why"].endswith(
        "did not train (within 5 points of chance, 10 %)")
    assert stats.analysis_verdict(True, [41.0, 42.5, 40.2], [14.8, 15.6, 13.9], "x", top1=[[90.0, 91.0]],
                                  chance=10.0)["verdict"] == stats.REPRODUCED
    # weights that moved, of runs still learning at the end of their schedule: no verdict either, and why
    rising = stats.analysis_verdict(True, [41.0, 42.5, 40.2], [14.8, 15.6, 13.9], "x", unsettled="A still rose +3.4")
    assert rising["verdict"] == stats.INCONCLUSIVE and rising["why"].endswith("not at its plateau: A still rose +3.4")


def test_a_row_that_did_not_train_is_marked_in_the_plot():
    import matplotlib
    matplotlib.use("Agg")
    from vitmlp.plots import plot_deltas
    df = pd.DataFrame({"label": ["base"] * 3 + ["dead"] * 3 + ["fine"] * 3, "seed": [0, 1, 2] * 3,
                       "status": "ok", "num_classes": 10,
                       "final_top1": [60.0, 61.0, 60.5, 10.2, 9.8, 10.1, 63.0, 62.5, 63.4]})
    table = compare(df, {"base": 70.0, "dead": 71.0, "fine": 72.0}, "base", numbers=True)
    assert table.set_index("row").loc["dead", "why"].startswith("did not train")
    fig = plot_deltas(table, "base", "t", "smoke")
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "dead (did not train)" in labels and "fine" in labels
    # no bar of ours for it: its -50 points would say nothing and squash the rows that trained
    assert fig.axes[0].get_xlim()[0] > -20
    with pytest.raises(ValueError, match="numbers=True"):   # the printed "95% CI" is not parsed back
        plot_deltas(table.drop(columns=["ci_lo", "ci_hi"]), "base", "t", "smoke")


def test_ordering_counts_swapped_pairs_and_decides_by_rank_correlation():
    from vitmlp.stats import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, ordering
    same = ordering(["a", "b", "c", "d"], [4, 3, 2, 1], [40, 30, 20, 10])
    assert same["spearman"] == 1.0 and same["swapped"] == "none" and same["verdict"] == REPRODUCED
    one = ordering(["a", "b", "c", "d"], [4, 3, 1, 2], [40, 30, 20, 10])
    assert one["swapped"] == "c vs d" and one["of_pairs"] == 6 and one["spearman"] == 0.8
    assert one["verdict"] == REPRODUCED
    flipped = ordering(["a", "b", "c"], [1, 2, 3], [3, 2, 1])
    assert flipped["swapped_pairs"] == 3 and flipped["verdict"] == NOT_REPRODUCED
    assert ordering(["a", "b"], [1, 2], [1, 2])["verdict"] == INCONCLUSIVE   # no rank correlation of 2 rows
    with pytest.raises(ValueError, match="one measured and one paper value per row"):
        ordering(["a", "b"], [1], [1, 2])


def test_a_crash_claim_needs_every_run_to_crash_and_a_run_at_chance_is_no_crash():
    # Scaled ReLU Tables 1-3, 5: the paper prints "crash" or a top-1 (10 classes: chance 10 %)
    v = stats.crash_verdict
    assert v("crash", ["crash"] * 3, [math.nan] * 3, 10.0)["verdict"] == stats.REPRODUCED
    assert v("crash", ["ok"] * 3, [60.0, 61.0, 59.0], 10.0) == {"verdict": stats.NOT_REPRODUCED,
                                                                "why": "none of 3 runs crashed"}
    assert v("crash", ["ok", "crash", "ok"], [60.0, math.nan, 59.0], 10.0)["why"] == "1 of 3 runs crashed"
    stuck = v("crash", ["ok"] * 2, [10.4, 11.0], 10.0)
    assert stuck["verdict"] == stats.INCONCLUSIVE and "did not train" in stuck["why"]
    assert v("79.8", ["ok"] * 2, [60.0, 61.0], 10.0)["verdict"] == stats.REPRODUCED
    assert v("79.8", ["crash"] * 2, [math.nan] * 2, 10.0)["verdict"] == stats.NOT_REPRODUCED
    # a scale where the paper's reference configuration does not crash cannot refute a printed crash ...
    cannot = v("crash", ["ok"] * 3, [60.0, 61.0, 59.0], 10.0, no_crash_here="the patchify stem never crashes here")
    assert cannot == {"verdict": stats.INCONCLUSIVE,
                      "why": "none of 3 runs crashed, but the patchify stem never crashes here"}
    # ... but a crash there still reproduces it, and a crash where the paper trains still refutes
    assert v("crash", ["crash"] * 2, [math.nan] * 2, 10.0, no_crash_here="x")["verdict"] == stats.REPRODUCED
    assert v("79.8", ["crash"] * 2, [math.nan] * 2, 10.0, no_crash_here="x")["verdict"] == stats.NOT_REPRODUCED
    assert v("79.8", ["ok"] * 2, [60.0, 61.0], 10.0, no_crash_here="x")["verdict"] == stats.REPRODUCED
    # 20 % with a train loss that barely fell (2.31 -> 2.18) neither crashed nor trained; a crashed run's curve is not read
    flat, fell = {"train_loss": [2.31, 2.25, 2.18]}, {"train_loss": [2.3, 1.8, 1.3]}
    assert v("79.8", ["ok"] * 2, [19.0, 21.0], 10.0, curves=[flat, fell]) == {
        "verdict": stats.INCONCLUSIVE,
        "why": "no crash, but did not train (train loss ended less than 10 % below its first epoch's)"}
    assert v("79.8", ["ok", "crash"], [60.0, math.nan], 10.0, curves=[fell, flat])["why"] == "1 of 2 runs crashed"
    assert v("79.8", ["ok"] * 2, [60.0, 61.0], 10.0, curves=[fell, fell])["verdict"] == stats.REPRODUCED


def test_a_run_far_below_its_stems_baseline_recipe_failed_like_a_crash():
    # Scaled ReLU Table 1 at cpu: the patchify stem at the mapped 1e-3 ends ~55 % where its baseline recipe ends ~98 %
    v = stats.crash_verdict
    assert v("crash", ["ok"] * 2, [57.7, 52.65], 10.0) == {"verdict": stats.NOT_REPRODUCED,
                                                           "why": "none of 2 runs crashed"}   # no baseline: crashes only
    assert v("crash", ["ok", "crash"], [57.7, math.nan], 10.0, baseline=97.6) == {
        "verdict": stats.REPRODUCED,
        "why": "all 2 runs failed: 1 crashed, 1 ended more than 20 points below the stem's baseline recipe (97.6 %): 57.7"}
    assert v("crash", ["ok"] * 2, [57.7, 77.7], 10.0, baseline=97.6) == {
        "verdict": stats.INCONCLUSIVE,
        "why": "1 of 2 runs failed: none crashed, 1 ended more than 20 points below the stem's baseline recipe (97.6 %): 57.7"}
    assert v("crash", ["ok"] * 2, [96.1, 98.9], 10.0, baseline=97.6) == {
        "verdict": stats.NOT_REPRODUCED,
        "why": "none of 2 runs crashed or ended more than 20 points below the stem's baseline recipe (97.6 %)"}
    assert v("81.9", ["ok"] * 3, [57.7, 52.6, 10.2], 10.0, baseline=97.6)["verdict"] == stats.NOT_REPRODUCED
    assert v("81.9", ["ok"] * 2, [78.0, 99.0], 10.0, baseline=97.6)["verdict"] == stats.REPRODUCED
    # runs at chance against a baseline that trained failed; against one that did not (12 %), they did not train
    assert v("crash", ["ok"] * 2, [10.2, 10.4], 10.0, baseline=97.6)["verdict"] == stats.REPRODUCED
    assert "did not train" in v("crash", ["ok"] * 2, [10.2, 10.4], 10.0, baseline=12.0)["why"]
    # a failed run's curve says whether it was still rising at the end of the schedule
    late = {"val_top1": [10.0, 10.0, 20.0, 30.0, 40.0, 48.0, 52.0, 57.7]}
    assert v("crash", ["ok", "crash"], [57.7, math.nan], 10.0, curves=[late, {}], baseline=97.6)["why"].endswith(
        "1 crashed, 1 ended more than 20 points below the stem's baseline recipe (97.6 %): 57.7 (+9.7 over its last quarter)")
    assert stats.failed(["ok", "ok", "crash"], [77.5, 77.7, math.nan], 97.6) == [True, False, True]
    assert stats.failed(["ok", "crash"], [10.0, math.nan], None) == [False, True]


def test_outcome_shows_a_crash_with_its_step_never_as_a_number():
    assert stats.outcome(["crash"], [math.nan], [37]) == "crash (step 37)"
    assert stats.outcome(["ok", "ok"], [60.0, 62.0], [None, None]) == "61.0 ± 1.4"
    assert stats.outcome(["ok", "crash", "crash"], [60.0, math.nan, math.nan], [None, 5, 12.0]) == \
        "60.0; crash (steps 5, 12)"


def test_plot_outcomes_writes_a_crash_with_its_step_and_draws_no_bar_for_it():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from vitmlp.plots import plot_outcomes
    fig, ax = plt.subplots()
    plot_outcomes(ax, ["a", "b"], [61.0, math.nan], ["61.0 ± 1.4", "crash (step 37)"], 10.0)
    assert [t.get_text() for t in ax.texts] == [" crash (step 37)"]
    assert [p.get_width() for p in ax.patches] == [61.0, 0.0]
    at = dict(zip([t.get_text() for t in ax.get_yticklabels()], ax.get_yticks()))
    assert at["a"] > at["b"]   # the first row on top
    plt.close(fig)


def test_rows_of_two_series_get_error_bars_against_their_own_baseline():
    import matplotlib
    matplotlib.use("Agg")
    from vitmlp.plots import plot_deltas
    df = pd.DataFrame({"label": ["base"] * 3 + ["x"] * 3 + ["base2"] * 3 + ["y"] * 3, "seed": [0, 1, 2] * 4,
                       "status": "ok", "num_classes": 10,
                       "final_top1": [60.0, 61.0, 60.5, 62.0, 62.5, 62.2, 80.0, 70.0, 90.0, 81.0, 71.0, 91.0]})
    table = pd.concat([compare(df[df.label.isin(["base", "x"])], {"base": 70.0, "x": 71.0}, "base", numbers=True)
                       .assign(vs="base"),
                       compare(df[df.label.isin(["base2", "y"])], {"base2": 70.0, "y": 70.5}, "base2", numbers=True)
                       .assign(vs="base2")], ignore_index=True)
    fig = plot_deltas(table, "base", "t", "smoke")
    ax = fig.axes[0]
    assert sorted(t.get_text() for t in ax.get_yticklabels()) == ["x", "y"]      # both baselines left out
    assert plot_deltas(table.assign(why="not at the plateau: x still rose"), "base", "t", "smoke").axes[0] \
        .get_yticklabels()[0].get_text() == "x (not at its plateau)"
    ours = [c for c in ax.containers if c.get_label().startswith("this book")][0]
    widths = {round(b.get_width(), 2) for b in ours.patches}
    assert widths == {1.73, 1.0}          # x - base and y - base2, each against its own baseline
    bars = ours.errorbar.lines[2][0].get_segments()
    half = {round((s[1][0] - s[0][0]) / 2, 1) for s in bars}
    assert len(half) == 2 and max(half) > 10     # y's interval has base2's 10-point spread, x's does not
    assert ax.get_xlabel() == "top-1 difference to the row's baseline (points)"


def test_a_judged_row_prints_the_interval_and_the_mde_beside_its_verdict():
    from vitmlp.stats import judged, mde
    j = judged(-1.0, [90.0, 91.0, 92.0], [80.0, 81.0, 82.0])
    assert j["verdict"] == "reproduced" and j["ours Δ"] == -10.0
    assert j["95% CI"].startswith("[-") and j["MDE"] == round(mde(1.0, 3), 1)
    assert judged(-1.0, [90.0], [80.0])["95% CI"] == ""   # one seed: no interval


def test_a_judged_score_between_0_and_1_keeps_its_decimals():
    from vitmlp.stats import judged
    init, trained = [0.010, 0.012, 0.008], [0.052, 0.049, 0.055]   # a smoothness that moved by 0.04
    coarse, fine = judged(1.0, init, trained), judged(1.0, init, trained, digits=3)
    assert coarse["95% CI"] == "[+0.0, +0.0]" and coarse["MDE"] == 0.0   # top-1 decimals hide it
    assert fine["ours Δ"] == pytest.approx(0.042) and fine["MDE"] == 0.008
    assert fine["95% CI"] == "[+0.036, +0.048]" and fine["verdict"] == coarse["verdict"] == "reproduced"
    flat = judged(1.0, init, [0.011, 0.009, 0.013], digits=3)
    assert flat["verdict"] == "inconclusive at this scale" and flat["why"] == "interval [-0.004, +0.006] includes 0"


def _scores(scores: dict) -> "pd.DataFrame":
    return pd.DataFrame([{"label": l, "seed": s, "status": "ok", "final_top1": v, "num_classes": 10}
                         for l, vs in scores.items() for s, v in enumerate(vs)])


def test_compare_pairs_gives_each_pair_its_own_baseline():
    df = _scores({"a": [50.0, 51.0, 52.0], "b": [60.0, 61.0, 62.0], "c": [50.5, 51.5, 52.5]})
    t = stats.compare_pairs(df, [("b beats a", "a", "b", 80.0, 82.0), ("c as b", "b", "c", 80.0, 80.2)])
    assert list(t.row) == ["b", "c"] and list(t.vs) == ["a", "b"] and list(t["paper Δ"]) == [2.0, 0.2]
    assert list(t["ours Δ"]) == [10.0, -9.5]
    assert list(t.verdict) == ["reproduced", "not reproduced"]   # c is 9.5 points off b: not "about the same"
    assert t.ci_lo[0] > 0 and t.ci_hi[0] == pytest.approx(20 - t.ci_lo[0])
    with pytest.raises(ValueError, match="compares 'a' with itself"):
        stats.compare_pairs(df, [("x", "a", "a", 1.0, 1.0)])
    fig = plot_pairs(t, "pairs", "smoke")
    ax = fig.axes[0]
    assert dict(zip([t.get_text() for t in ax.get_yticklabels()], ax.get_yticks())) == {"b vs a": 1, "c vs b": 0}
    # a pair whose runs stayed at chance draws no bar of ours (its -40 points would squash the others)
    dead = stats.compare_pairs(_scores({"a": [50.0, 51.0, 52.0], "z": [10.0, 10.5, 9.5]}), [("z beats a", "a", "z", None, "higher")])
    ours = [c for c in plot_pairs(dead, "pairs", "smoke").axes[0].containers if c.get_label().startswith("this book")][0]
    assert dead.why[0].startswith("did not train") and math.isnan(ours.patches[0].get_width())


def test_compare_pairs_tests_the_texts_direction_without_printed_numbers():
    df = _scores({"a": [50.0, 51.0, 52.0], "b": [60.0, 60.2, 60.4], "c": [60.1, 60.2, 60.3], "d": [10.0, 10.5, 9.5]})
    t = stats.compare_pairs(df, [("x2 best", "a", "b", None, "higher"), ("x2 worse", "a", "b", None, "lower"),
                              ("same", "b", "c", None, "about the same"), ("untrained", "a", "d", None, "lower")])
    assert list(t.paper) == ["higher", "lower", "about the same", "lower"] and t["paper Δ"].isna().all()
    assert list(t.verdict) == ["reproduced", "not reproduced", "reproduced", "inconclusive at this scale"]
    assert t.why[0] == "interval excludes 0 on the paper's side" and t.why[3].startswith("did not train")
    with pytest.raises(ValueError, match="unknown paper direction 'better'; valid choices: higher, lower, about the same"):
        stats.compare_pairs(df, [("x", "a", "b", None, "better")])


def test_seed_differences_pair_runs_by_seed():
    df = _scores({"seq": [50.0, 52.0, 54.0], "par": [51.0, 55.0], "flat": [10.0, 10.0, 10.0]})
    d = stats.seed_differences(df, "seq", "par", "par - seq")
    assert list(d.seed) == [0, 1] and list(d.final_top1) == [1.0, 3.0] and set(d.label) == {"par - seq"}
    assert stats.seed_differences(df, "flat", "par", "x").empty   # a row at chance: no differences

def _seeded(label, finals, gain, epochs=8):
    return _runs(label, finals, gain, epochs).assign(seed=range(len(finals)))


def test_pairs_and_their_seed_differences_are_read_at_the_plateau():
    df = pd.concat([_seeded("seq", [50.0, 51.0, 52.0], 0.5), _seeded("par", [53.0, 55.0, 54.0], 3.0)])
    t = stats.compare_pairs(df, [("x2 best", "seq", "par", None, "higher")])
    assert t.verdict[0] == stats.INCONCLUSIVE and t.why[0].startswith("not at the plateau: par still rose +3.0")
    twins = pd.concat([_seeded("par", [60.0, 62.0, 61.0], 1.0, epochs=16), _seeded("seq", [52.0, 53.0, 54.0], 0.5, epochs=16)])
    t = stats.compare_pairs(df, [("x2 best", "seq", "par", None, "higher")], doubled=twins)
    d = stats.welch([52.0, 53.0, 54.0], [60.0, 62.0, 61.0])     # the interval drawn is that of the runs read
    assert t["ours Δ"][0] == 8.0 and (t.ci_lo[0], t.ci_hi[0]) == (d.lo, d.hi) and t.verdict[0] == stats.REPRODUCED
    assert t["certifies ±"][0] == max(abs(x) for x in d.interval(0.90))   # the narrowest margin it would certify
    assert t["read at 2x"][0] == "par; seq"   # which rows were read from their twins, for a page to say so
    plain = stats.compare(df, {"seq": None, "par": "higher"}, base="seq", doubled=twins)
    assert not set(plain) & {"ci_lo", "ci_hi", "certifies ±", "read at 2x"}   # a page's table keeps its columns
    fig = plot_pairs(stats.compare_pairs(df, [("x2 best", "seq", "par", None, "higher")]), "pairs", "smoke")
    assert [x.get_text() for x in fig.axes[0].get_yticklabels()] == ["par vs seq (not at its plateau)"]
    # a claim on differences is as settled as the rows they are made of
    deep = pd.concat([_seeded("seq2", [40.0, 41.0, 42.0], 0.0), _seeded("par2", [50.0, 51.0, 52.0], 0.0)])
    gains = lambda doubled: pd.concat([stats.seed_differences(df, "seq", "par", "shallow", doubled=doubled),   # noqa: E731
                                       stats.seed_differences(deep, "seq2", "par2", "deep")])
    t = stats.compare_pairs(gains(None), [("grows with depth", "shallow", "deep", None, "higher")])
    assert t.verdict[0] == stats.INCONCLUSIVE and t.why[0].startswith("not at the plateau: par still rose +3.0")
    g = gains(twins)
    assert g[g.label == "shallow"].final_top1.tolist() == [8.0, 9.0, 7.0]
    t = stats.compare_pairs(g, [("grows with depth", "shallow", "deep", None, "higher")])
    assert t["ours Δ"][0] == 2.0 and t.verdict[0] == stats.INCONCLUSIVE
    assert t.why[0].endswith("read at 2x epochs (shallow: par: the profile's epochs still rose +3.0; at 2x +1.0; "
                             "seq: level at the profile's epochs (+0.5), read at 2x beside par; at 2x +0.5)")
    # one schedule per comparison across the pairs too: the shallow gain is read at 2x, so the deep one is
    both = pd.concat([df, deep])
    four = ["seq", "par", "seq2", "par2"]
    at_one = lambda doubled: pd.concat([stats.seed_differences(both, "seq", "par", "shallow", doubled=doubled, together=four),   # noqa: E731
                                        stats.seed_differences(both, "seq2", "par2", "deep", doubled=doubled, together=four)])
    t = stats.compare_pairs(at_one(twins), [("grows with depth", "shallow", "deep", None, "higher")])
    assert t.verdict[0] == stats.INCONCLUSIVE and t.why[0].count("so par2 is too (one schedule per comparison)") == 1
    deep_2x = pd.concat([_seeded("seq2", [41.0, 42.0, 43.0], 0.0, epochs=16), _seeded("par2", [53.0, 54.0, 55.0], 0.0, epochs=16)])
    g = at_one(pd.concat([twins, deep_2x]))
    assert g[g.label == "deep"].final_top1.tolist() == [12.0, 12.0, 12.0]   # its 2x runs, beside the shallow gain's
    t = stats.compare_pairs(g, [("grows with depth", "shallow", "deep", None, "higher")])
    assert t.verdict[0] == stats.REPRODUCED and "deep: par2: level at the profile's epochs" in t.why[0]


def test_each_pair_is_judged_against_the_chance_level_of_its_own_data_set():
    """Table 6 fine-tunes on two sets (10 and 6 classes): a run at the 6-class set's chance did not train."""
    ten = _scores({"a": [50.0, 51.0, 52.0], "b": [60.0, 61.0, 62.0]})
    six = _scores({"c": [16.0, 17.0, 18.0], "d": [20.0, 21.0, 19.0]}).assign(num_classes=6)
    t = stats.compare_pairs(pd.concat([ten, six]), [("x", "a", "b", None, "higher"), ("y", "c", "d", None, "higher")])
    assert t.verdict[0] == stats.REPRODUCED
    assert t.verdict[1] == stats.INCONCLUSIVE and t.why[1].startswith("did not train")


def test_seed_summary_counts_each_groups_planned_recorded_crashed_and_untrained_runs():
    curves = lambda a, b: {"val_top1": [10.0, a, b], "train_loss": [2.3, 2.0, 1.15]}   # noqa: E731
    df = pd.DataFrame({"label": ["a", "a", "a", "b", "b"], "status": ["ok", "ok", "crash", "ok", "missing"],
                       "num_classes": 10, "final_top1": [80.0, 84.0, math.nan, 12.0, math.nan],
                       "curves": [curves(70.0, 80.0), curves(80.0, 84.0), None, curves(11.0, 12.0), None]})
    t = stats.seed_summary(df).set_index("label")
    assert t.loc["a", ["planned", "recorded", "crashed", "did not train"]].tolist() == [3, 3, 1, 0]
    assert t.loc["a", "top-1 per seed"] == "80.0, 84.0" and t.loc["a", "mean"] == 82.0
    assert t.loc["a", "std"] == pytest.approx(math.sqrt(8.0)) and t.loc["a", "last-quarter gain"] == 7.0   # (10 + 4) / 2
    assert t.loc["a", "train loss fell"] == "50%, 50%"
    assert t.loc["b", ["planned", "recorded", "crashed", "did not train"]].tolist() == [2, 1, 0, 1]   # 12 % is near chance
    assert math.isnan(t.loc["b", "std"])                                                            # one seed: no spread
    by_two = stats.seed_summary(df.assign(lr=[1, 2, 1, 1, 1]), ["label", "lr"])
    assert by_two[["label", "lr", "planned"]].values.tolist() == [["a", 1, 2], ["a", 2, 1], ["b", 1, 2]]


def test_plateau_twins_plans_a_rising_arm_with_the_arms_it_is_compared_with():
    from vitmlp.experiment import Arm, plateau_twins
    from vitmlp.profiles import get_profile
    arms = [Arm(x, "resmlp_S12") for x in ("base", "bag", "x", "short")]
    df = pd.concat([_seeded("base", [80.0, 81.0], 0.5), _seeded("bag", [55.0, 56.0], 3.0),
                    _seeded("x", [79.0, 80.0], 0.0), _seeded("short", [40.0, 45.0], 9.0)])
    def planned(**kw):
        twins = plateau_twins("smoke", arms, df, own_schedule=["short"], **kw)
        assert all(c.epochs == 2 * get_profile("smoke").epochs for _, c in twins)
        return sorted({(lab, c.seed) for lab, c in twins})
    assert planned(compared="base") == [("bag", 0), ("bag", 1), ("base", 0), ("base", 1)]   # not x: compared with base only
    assert planned() == [("bag", 0), ("bag", 1), ("base", 0), ("base", 1), ("x", 0), ("x", 1)]   # one group
    assert planned(compared=[["x", "bag"], ["base", "short"]]) == [("bag", 0), ("bag", 1), ("x", 0), ("x", 1)]
    assert plateau_twins("smoke", arms, df[df.label.isin(["base", "x", "short"])], own_schedule=["short"]) == []
    with pytest.raises(ValueError, match=r"compared names \['bas'\], not among the arms"):   # a typo would plan nothing
        plateau_twins("smoke", arms, df, compared=[["bas", "bag"]])


def test_plateau_twins_plans_a_level_arm_whose_recorded_2x_runs_still_gained_with_its_partner(tmp_path):
    from vitmlp.experiment import Arm, plan, plateau_twins
    from vitmlp.profiles import get_profile
    from vitmlp.records import config_hash, save_record
    arms = [Arm("base", "resmlp_S12"), Arm("lin", "resmlp_S12", overrides={"lr": 1e-4})]
    df = pd.concat([_seeded("base", [80.0, 81.0], 0.5), _seeded("lin", [55.0, 56.0], 0.3)])   # both level
    epochs = get_profile("smoke").epochs
    def planned():
        return sorted((lab, c.epochs // epochs, c.seed) for lab, c in plateau_twins("smoke", arms, df, compared="base", records=tmp_path))
    assert planned() == []
    lin_2x = plan("smoke", [Arm("lin", "resmlp_S12", overrides={"lr": 1e-4, "epochs": 2 * epochs})], [0, 1])
    for top1 in (57.0, 60.0):   # lin's 2x runs: +1.5 (level), then +4.5 (rising)
        for _, c in lin_2x:   # trained as the twins of another claim's rising row
            save_record({"hash": config_hash(c), "status": "ok", "profile": "smoke", "config": c.to_dict(), "num_classes": 10,
                         "metrics": {"final_top1": top1}, "curves": {"val_top1": [50.0] * 4 + [top1] * 12},
                         "created": "2026-12-08T00:00:00+00:00"}, tmp_path)
        assert planned() == ([] if top1 == 57.0 else [("base", 2, 0), ("base", 2, 1), ("lin", 2, 0), ("lin", 2, 1)])


def test_plateau_twins_plans_4x_once_the_2x_runs_are_recorded_and_one_still_rises(tmp_path):
    from vitmlp.experiment import Arm, plateau_twins
    from vitmlp.profiles import get_profile
    from vitmlp.records import config_hash, save_record
    arms = [Arm("base", "resmlp_S12"), Arm("bag", "resmlp_S12", overrides={"lr": 1e-4})]   # two configs, two records
    df = pd.concat([_seeded("base", [80.0, 81.0], 0.5), _seeded("bag", [55.0, 56.0], 3.0)])
    epochs = get_profile("smoke").epochs
    def planned():
        return sorted((lab, c.epochs // epochs, c.seed) for lab, c in plateau_twins("smoke", arms, df, compared="base", records=tmp_path))
    def record(gain, only=("base", "bag"), base_gain=0.5):   # the planned runs as trained: bag rising by ``gain``
        for lab, c in [r for r in plateau_twins("smoke", arms, df, compared="base", records=tmp_path) if r[0] in only]:
            g = gain if lab == "bag" else base_gain
            save_record({"hash": config_hash(c), "status": "ok", "profile": "smoke", "config": c.to_dict(),
                         "num_classes": 10, "metrics": {"final_top1": 60.0}, "curves": {"val_top1": [50.0] * 11 + [60.0 - g] * 4 + [60.0]},
                         "created": "2026-12-06T00:00:00+00:00"}, tmp_path)
    first = planned()
    assert first == [("bag", 2, 0), ("bag", 2, 1), ("base", 2, 0), ("base", 2, 1)]   # 4x waits on what 2x shows
    record(gain=1.0, only=["bag"])
    assert planned() == first                                                       # level at 2x: no 4x
    record(gain=2.5, only=["bag"])
    at_4x = [("bag", 2, 0), ("bag", 2, 1), ("bag", 4, 0), ("bag", 4, 1), ("base", 4, 0), ("base", 4, 1)]
    assert planned() == at_4x   # bag climbs alone; base (level) is read beside it at 4x, not at 2x as well
    record(gain=2.5)            # bag still rises at 4x: base goes on to 8x beside it (its 4x runs, recorded, kept)
    assert planned() == [("bag", 2, 0), ("bag", 2, 1), ("bag", 4, 0), ("bag", 4, 1), ("bag", 8, 0), ("bag", 8, 1),
                         ("base", 4, 0), ("base", 4, 1), ("base", 8, 0), ("base", 8, 1)]
    record(gain=1.0)
    assert planned() == first                                                       # both level at 2x: no 4x
    record(gain=1.0, base_gain=2.5)   # bag levels at 2x, base rises there: base climbs to 4x, and the claim with it
    assert planned() == [("bag", 2, 0), ("bag", 2, 1), ("bag", 4, 0), ("bag", 4, 1), ("base", 2, 0), ("base", 2, 1),
                         ("base", 4, 0), ("base", 4, 1)]
    record(gain=2.5, base_gain=1.0)   # bag climbs again, alone: base's recorded 2x and 4x runs are still read
    assert planned() == [("bag", 2, 0), ("bag", 2, 1), ("bag", 4, 0), ("bag", 4, 1), ("bag", 8, 0), ("bag", 8, 1),
                         ("base", 2, 0), ("base", 2, 1), ("base", 4, 0), ("base", 4, 1), ("base", 8, 0), ("base", 8, 1)]
