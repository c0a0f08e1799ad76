"""How a verdict is decided: confidence intervals over seeds, equivalence, "did not train", the
minimal detectable effect, and a Holm correction over the rows of a table.

    d = welch(base_seeds, variant_seeds)      # variant - base: delta, 95 % interval, dof, p-values
    row_verdict(paper_delta=+0.7, base=..., other=...)   # {"verdict": ..., "why": ...}
    item_verdict(table)                       # rows of experiment.compare, Holm-corrected

* A difference gets a 95 % interval from Welch's t with Satterthwaite's degrees of freedom; fewer
  than 2 seeds on either side gives no interval, hence no firm verdict.
* A directional claim (the paper's difference beyond ``equal_within``) is reproduced when the
  interval excludes 0 on the paper's side, not reproduced when it excludes 0 on the other side.
* An "about the same" claim is reproduced only when the 90 % interval lies inside +-``margin``
  (two one-sided tests at 5 %), not reproduced when the 95 % interval lies outside it.
* A "no better" claim (``NOT_HIGHER``: the paper's "none outperforms the baseline") is the upper
  half of "about the same": reproduced when the 90 % interval ends below +``margin`` (one one-sided
  test at 5 %; a loss of any size agrees), not reproduced when the 95 % interval lies above it.
* A run within ``DID_NOT_TRAIN_POINTS`` of chance did not train, nor did one whose train loss ended
  less than ``DID_NOT_TRAIN_LOSS`` below its first epoch's (a run that moved off chance but never
  learned the task, :func:`stalled`): a row with such runs is inconclusive, whatever its difference.
* A stability row at the baseline's learning rate or above (Scaled ReLU) *failed* where the paper prints a crash
  when each run crashed or ended more than ``FAILED_POINTS`` below its stem's baseline recipe
  (:func:`failed`): a reduced model need not diverge where the paper's does, but it can collapse.
* A top-1 row (one given ``chance``) also has a ceiling, 100 %: where the baseline sits closer to
  it than the margin, a gain that would refute a "no better" or an "about the same" claim has no
  room to show, so such a claim is not reproduced by agreement there (inconclusive, "at the
  ceiling"); a loss beyond the margin still refutes it.
* An ``analysis`` claim read from trained weights counts only when the measured quantity moved
  from its value at initialisation beyond seed noise (:func:`analysis_verdict`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as st

from .choices import check_choice

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive at this scale"
LEVEL = 0.95
DID_NOT_TRAIN_POINTS = 5.0     # top-1 within this many points of chance: the run did not train
DID_NOT_TRAIN_LOSS = 0.10      # train loss that ended less than this share below its first epoch's: nor did it
FAILED_POINTS = 20.0           # top-1 this far below its stem's baseline recipe: the run failed (failed)
PLATEAU_POINTS = 2.0           # the profile's plateau: doubling the schedule adds at most this (issue 12)
MAX_DOUBLINGS = 3              # the plateau check reads a still-rising row at up to 2**this times its schedule
CEILING = 100.0                # top-1 %: no gain beyond it
FAR_LARGER = 5.0               # an effect this many times the paper's says more about the scale than the claim
NOT_HIGHER = "not higher"     # row_verdict's paper_delta for a "no better than the baseline" claim
BASELINE = "(baseline)"        # compare's verdict of its baseline row: no claim of its own
NUMBERS = ["ci_lo", "ci_hi", "certifies ±", "read at 2x"]   # the columns compare(numbers=True) adds
# A claim the paper's text states without printed numbers (its figures are plotted only): the
# direction of ``other - base``, tested as row_verdict tests a printed difference of that sign
# (an infinite one: no "far larger than the paper's" remark), of none ("about the same"), or as its
# one-sided "no better" (Dual PatchNorm: no LayerNorm placement outperforms pre-LN).
DIRECTIONS = {"higher": math.inf, "lower": -math.inf, "about the same": 0.0, "not higher": NOT_HIGHER}


def _clean(x) -> np.ndarray:
    a = pd.Series(x, dtype=float).dropna().to_numpy()
    return a


@dataclass
class Diff:
    """``other - base`` over seeds: mean difference, interval at ``level``, Welch dof and p-values."""
    delta: float
    lo: float
    hi: float
    se: float
    dof: float
    n_base: int
    n_other: int
    level: float = LEVEL

    def p_greater(self) -> float:
        """One-sided p-value of "other > base"."""
        return float(st.t.sf(self.delta / self.se, self.dof)) if self.se > 0 else float(self.delta <= 0)

    def p_less(self) -> float:
        return float(st.t.cdf(self.delta / self.se, self.dof)) if self.se > 0 else float(self.delta >= 0)

    def interval(self, level: float) -> tuple[float, float]:
        if math.isnan(self.dof):
            return math.nan, math.nan
        h = st.t.ppf(0.5 + level / 2, self.dof) * self.se
        return self.delta - h, self.delta + h

    def mde(self, power: float = 0.8) -> float:
        """Smallest true difference this Welch test detects with probability ``power`` at its level
        (its own standard error and dof: with one arm constant, as at initialisation, it exceeds the
        interval's half-width, where a pooled :func:`mde` would not)."""
        return math.nan if math.isnan(self.dof) else _detectable(self.se, self.dof, self.level, power)


def welch(base, other, level: float = LEVEL) -> Diff:
    """Welch's interval for ``mean(other) - mean(base)``; NaN bounds when a side has < 2 seeds."""
    a, b = _clean(base), _clean(other)
    mean = lambda x: x.mean() if len(x) else math.nan  # noqa: E731
    std = lambda x: x.std(ddof=1) if len(x) > 1 else math.nan  # noqa: E731
    return welch_from_stats(mean(a), std(a), len(a), mean(b), std(b), len(b), level)


def welch_from_stats(mean_base: float, std_base: float, n_base: int, mean_other: float, std_other: float,
                     n_other: int, level: float = LEVEL) -> Diff:
    """:func:`welch` from printed summaries (mean, sample std, runs), e.g. a paper's "82.54 +- 0.09 over 5 runs"."""
    delta = mean_other - mean_base
    if n_base < 2 or n_other < 2:
        return Diff(delta, math.nan, math.nan, math.nan, math.nan, n_base, n_other, level)
    va, vb = std_base ** 2 / n_base, std_other ** 2 / n_other
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va ** 2 / (n_base - 1) + vb ** 2 / (n_other - 1)) if se > 0 else n_base + n_other - 2.0
    d = Diff(delta, math.nan, math.nan, se, dof, n_base, n_other, level)
    d.lo, d.hi = d.interval(level)
    return d


def did_not_train(top1, chance: float, points: float = DID_NOT_TRAIN_POINTS) -> bool:
    """True when the mean top-1 of these runs is within ``points`` of chance (or there are none)."""
    a = _clean(top1)
    return len(a) == 0 or a.mean() < chance + points


def late_gain(runs: pd.DataFrame, key: str = "val_top1", last: float = 0.25) -> pd.Series:
    """Per run (rows of run_table, aligned with ``runs``): how far ``key`` rose over the ``last`` share
    of its epochs. A run whose last quarter alone adds more than PLATEAU_POINTS had not reached its
    plateau: what it measures at the end is still moving with the schedule."""
    def gain(curve):
        v = [x for x in curve.get(key, []) if x is not None]
        return v[-1] - v[max(0, round(len(v) * (1 - last)) - 1)] if len(v) > 1 else math.nan
    return runs.curves.map(gain).astype(float)


def chance_level(df: pd.DataFrame, metric: str = "final_top1") -> float | None:
    """Top-1 of a guess, in percent, for the runs of ``df`` (run_table rows); None for a metric that
    is not a top-1 or rows without a class count (a difference of two runs)."""
    classes = df["num_classes"].dropna() if "num_classes" in df else pd.Series(dtype=float)
    return 100 / classes.iloc[0] if metric.endswith("top1") and len(classes) else None


def mde(std: float, n: int, level: float = LEVEL, power: float = 0.8) -> float:
    """Smallest true difference between two arms of ``n`` seeds each (seed spread ``std``) that a
    two-sided test at ``level`` detects with probability ``power``; NaN below 2 seeds."""
    if n < 2 or not math.isfinite(std):
        return math.nan
    return _detectable(std * math.sqrt(2 / n), 2 * n - 2, level, power)


def _detectable(se: float, dof: float, level: float, power: float) -> float:
    """The true difference a two-sided t test of standard error ``se`` detects with ``power``."""
    return float((st.t.ppf(0.5 + level / 2, dof) + st.t.ppf(power, dof)) * se)


def row_verdict(paper_delta, base, other, *, equal_within: float = 0.5, margin: float = 1.0,
                chance: float | None = None, unsettled: str | None = None, untrained: str | None = None,
                digits: int = 1) -> dict:
    """Verdict, reason and statistics of one table row: our seeds of ``other`` against ``base``
    for the paper's difference ``paper_delta`` (same units, e.g. top-1 points), or NOT_HIGHER for a
    claim that ``other`` does not outperform ``base`` (judged within ``margin``); the reason prints
    an interval to ``digits`` decimals. ``unsettled``: why the row's runs had not reached their plateau
    (:func:`late_gain`), ``untrained``: why they did not train (:func:`stalled`); either leaves it inconclusive."""
    d = welch(base, other)
    out = {"Δ": d.delta, "ci_lo": d.lo, "ci_hi": d.hi, "p_paper": math.nan, "p_other": math.nan}
    if paper_delta is None or (isinstance(paper_delta, float) and math.isnan(paper_delta)):
        return {**out, "verdict": "", "why": "the paper prints no difference"}
    if not (len(_clean(base)) and len(_clean(other))):   # not trained yet (a notebook reading missing="skip")
        return {**out, "verdict": INCONCLUSIVE, "why": "no recorded run"}
    plateau = f"; not at the plateau: {unsettled}" if unsettled else ""   # a longer schedule may still settle it
    if chance is not None and (did_not_train(base, chance) or did_not_train(other, chance)):
        return {**out, "verdict": INCONCLUSIVE, "why": untrained_why(chance) + plateau}
    if untrained:
        return {**out, "verdict": INCONCLUSIVE, "why": untrained + plateau}
    if math.isnan(d.lo):   # a 1-seed row may be compared across schedules: it says the plateau too
        return {**out, "verdict": INCONCLUSIVE, "why": "fewer than 2 seeds: no interval" + plateau}
    if unsettled:
        return {**out, "verdict": INCONCLUSIVE, "why": f"not at the plateau: {unsettled}"}
    room = CEILING - _clean(base).mean() if chance is not None else math.inf

    def agreed(why):   # agreement counts only where a refuting gain had room to show
        if room >= margin:
            return {**out, "verdict": REPRODUCED, "why": why}
        return {**out, "verdict": INCONCLUSIVE, "why": f"at the ceiling: the baseline's {CEILING - room:.2f} % "
                                                        f"leaves +{room:.2f} points, less than the +{margin:g} a "
                                                        "refuting gain needs"}
    if isinstance(paper_delta, str) and paper_delta == NOT_HIGHER:   # no gain beyond +margin
        hi90 = d.interval(0.90)[1]
        out.update(p_paper=st.t.cdf((d.delta - margin) / d.se, d.dof) if d.se > 0 else float(d.delta >= margin),
                   p_other=st.t.sf((d.delta - margin) / d.se, d.dof) if d.se > 0 else float(d.delta <= margin))
        if hi90 < margin:
            return agreed(f"90 % interval below +{margin:g}")
        if d.lo > margin:
            return {**out, "verdict": NOT_REPRODUCED, "why": f"95 % interval above +{margin:g}"}
        return {**out, "verdict": INCONCLUSIVE, "why": f"interval [{d.lo:+.{digits}f}, {d.hi:+.{digits}f}] reaches +{margin:g}"}
    if abs(paper_delta) <= equal_within:       # "about the same": equivalence within +-margin
        lo90, hi90 = d.interval(0.90)
        out.update(p_paper=max(st.t.sf((d.delta + margin) / d.se, d.dof), st.t.cdf((d.delta - margin) / d.se, d.dof))
                   if d.se > 0 else float(abs(d.delta) >= margin),
                   p_other=st.t.sf((abs(d.delta) - margin) / d.se, d.dof) if d.se > 0 else float(abs(d.delta) <= margin))
        if -margin < lo90 and hi90 < margin:
            return agreed(f"90 % interval inside ±{margin:g}")
        if d.lo > margin or d.hi < -margin:
            return {**out, "verdict": NOT_REPRODUCED, "why": f"95 % interval outside ±{margin:g}"}
        return {**out, "verdict": INCONCLUSIVE, "why": f"interval [{d.lo:+.{digits}f}, {d.hi:+.{digits}f}] not inside ±{margin:g}"}
    up = paper_delta > 0
    out.update(p_paper=d.p_greater() if up else d.p_less(), p_other=d.p_less() if up else d.p_greater())
    if (d.lo > 0) if up else (d.hi < 0):
        ratio = abs(d.delta / paper_delta)
        why = (f"{ratio:.0f}x the paper's effect: reads the reduced scale, not the claim's size"
               if ratio >= FAR_LARGER else "interval excludes 0 on the paper's side")
        return {**out, "verdict": REPRODUCED, "why": why}
    if (d.hi < 0) if up else (d.lo > 0):
        return {**out, "verdict": NOT_REPRODUCED, "why": "interval excludes 0 on the other side"}
    return {**out, "verdict": INCONCLUSIVE, "why": f"interval [{d.lo:+.{digits}f}, {d.hi:+.{digits}f}] includes 0"}


def loss_fall(curves: dict) -> float:
    """How far a run's train loss fell from its first epoch to its last, as a share of the first
    (NaN without two epochs of curve)."""
    v = [x for x in (curves or {}).get("train_loss", []) if x is not None]
    return (v[0] - v[-1]) / v[0] if len(v) > 1 and v[0] > 0 else math.nan


def _flat(curves: pd.Series) -> pd.Series:
    """Per run: its train loss ended less than DID_NOT_TRAIN_LOSS below its first epoch's."""
    return pd.Series(curves).map(loss_fall).astype(float) < DID_NOT_TRAIN_LOSS


STALLED_WHY = f"did not train (train loss ended less than {DID_NOT_TRAIN_LOSS * 100:g} % below its first epoch's"


def untrained_runs(runs: pd.DataFrame, chance: float) -> pd.Series:
    """Per run (run_table rows): did it not train? Its top-1 within DID_NOT_TRAIN_POINTS of
    ``chance``, or its train loss ended less than DID_NOT_TRAIN_LOSS below its first epoch's."""
    near = runs.final_top1.astype(float) < chance + DID_NOT_TRAIN_POINTS
    return near | _flat(runs.curves) if "curves" in runs else near


def stalled(runs: pd.DataFrame, labels) -> str | None:
    """Why the rows ``labels`` of ``runs`` (run_table rows with curves) did not train by their train
    loss, or None: the rows with a run whose train loss ended less than DID_NOT_TRAIN_LOSS below its
    first epoch's. Such a run can sit 10 points above chance (reduced ResMLP under SGD: 2.31 -> 2.18,
    19 %) and still has not learned the task; its row carries no verdict."""
    if "curves" not in runs:
        return None
    flat = {}
    for lab in labels:
        curves = runs[runs.label == lab].curves
        if _flat(curves).any():
            flat[lab] = curves.map(loss_fall).min()
    return f"{STALLED_WHY}: " + ", ".join(f"{k} {v * 100:.0f} %" for k, v in flat.items()) + ")" if flat else None


def why_untrained(runs: pd.DataFrame, labels, chance: float | None, metric: str = "final_top1") -> str | None:
    """Why the rows ``labels`` of ``runs`` (run_table rows) did not train, or None: a row's mean
    ``metric`` within DID_NOT_TRAIN_POINTS of ``chance`` (when there is one), or :func:`stalled`."""
    if chance is not None and any(did_not_train(runs[runs.label == lab][metric], chance) for lab in labels):
        return untrained_why(chance)
    return stalled(runs, labels)


def untrained_why(chance: float) -> str:
    """Why a row or weights of runs within DID_NOT_TRAIN_POINTS of chance give no verdict."""
    return f"did not train (within {DID_NOT_TRAIN_POINTS:g} points of chance, {chance:.0f} %)"


def analysis_verdict(holds: bool | None, trained, at_init, what: str, *, top1=(), chance: float | None = None,
                     unsettled: str | None = None) -> dict:
    """Verdict of an ``analysis`` claim read from trained weights: ``holds`` (does the measured
    quantity show what the paper says?) counts only when ``what`` on the trained weights differs
    from its value at initialisation beyond seed noise (the 95 % Welch interval of trained - init,
    over seeds, excludes 0; ``MDE``: the smallest such move the seeds detect, :meth:`Diff.mde`);
    weights that did not move in that quantity say nothing about the claim.
    ``top1``: the top-1 of each group of runs the weights come from; with ``chance``, weights of a
    group that did not train (:func:`did_not_train`) give no verdict either, nor do weights of runs
    still learning (``unsettled``: :func:`at_plateau`'s why): the claims are about trained models."""
    d = welch(at_init, trained)
    shown = f"{what}: trained {np.mean(_clean(trained)):.3g} vs at init {np.mean(_clean(at_init)):.3g}"
    out = {"Δ": d.delta, "ci_lo": d.lo, "ci_hi": d.hi, "MDE": d.mde()}
    if chance is not None and any(did_not_train(t, chance) for t in top1):
        return {**out, "verdict": INCONCLUSIVE, "why": f"{shown}; {untrained_why(chance)}"}
    if unsettled:
        return {**out, "verdict": INCONCLUSIVE, "why": f"{shown}; not at its plateau: {unsettled}"}
    if math.isnan(d.lo):
        return {**out, "verdict": INCONCLUSIVE, "why": f"{shown}; fewer than 2 seeds: no interval"}
    if d.lo <= 0 <= d.hi:
        return {**out, "verdict": INCONCLUSIVE,
                "why": f"{shown}, interval [{d.lo:+.3g}, {d.hi:+.3g}] includes 0: the weights did not move"}
    if holds is None:
        return {**out, "verdict": INCONCLUSIVE, "why": f"{shown}; the measure does not decide the claim"}
    return {**out, "verdict": REPRODUCED if holds else NOT_REPRODUCED, "why": f"{shown} (moved beyond seed noise)"}


def holm(pvalues, alpha: float = 1 - LEVEL) -> np.ndarray:
    """Holm's step-down: which of ``pvalues`` are rejected at family-wise level ``alpha`` (NaN: never)."""
    p = np.asarray(pvalues, dtype=float)
    ok = ~np.isnan(p)
    reject = np.zeros(len(p), dtype=bool)
    order = np.argsort(np.where(ok, p, np.inf))
    m = int(ok.sum())
    for k, i in enumerate(order[:m]):
        if p[i] > alpha / (m - k):
            break
        reject[i] = True
    return reject


def item_verdict(rows) -> str:
    """One verdict for a table. From rows of :func:`experiment.compare` (with ``p_paper`` /
    ``p_other``): Holm over the rows with a firm verdict; reproduced when every such row still
    holds, not reproduced when some row's opposite still holds, else inconclusive. From a list of
    verdict words (separate claims of one figure): not reproduced if any is, reproduced if all are."""
    if isinstance(rows, pd.DataFrame) and {"p_paper", "p_other", "verdict"} <= set(rows.columns):
        firm = rows[rows.verdict.isin([REPRODUCED, NOT_REPRODUCED])]
        if firm.empty:
            return INCONCLUSIVE
        ours, theirs = holm(firm.p_paper.fillna(1.0)), holm(firm.p_other.fillna(1.0))
        if theirs.any():
            return NOT_REPRODUCED
        return REPRODUCED if ours.all() and len(firm) == len(claimed(rows.verdict)) else INCONCLUSIVE
    v = list(rows["verdict"] if isinstance(rows, pd.DataFrame) else rows)   # rows without p-values: their words
    if NOT_REPRODUCED in v:
        return NOT_REPRODUCED
    return REPRODUCED if v and all(x == REPRODUCED for x in v) else INCONCLUSIVE


def failed(status, top1, baseline: float | None) -> list[bool]:
    """Per run: did it fail? It crashed, or it ended more than FAILED_POINTS below ``baseline`` (its
    stem's mean top-1 at the baseline recipe; None: only a crash fails). The paper's crash is a
    divergence its fp16 loop stops on; a reduced model at the same raised rate may instead sit at
    chance for epochs and end far below its baseline: at that scale, that is the failure."""
    return [s == "crash" or (baseline is not None and s == "ok" and t < baseline - FAILED_POINTS)
            for s, t in zip(status, top1)]


def _failed_why(crashed: int, low: list, baseline: float, curves=None) -> str:
    """How a row's runs failed: how many crashed, how many ended far below ``baseline`` (their top-1,
    and how far each still rose over its last quarter, where ``curves`` of those runs are given)."""
    rise = late_gain(pd.DataFrame({"curves": list(curves)})) if curves is not None else [math.nan] * len(low)
    ended = ", ".join(f"{t:.1f}" + (f" (+{g:.1f} over its last quarter)" if g == g else "") for t, g in zip(low, rise))
    return (f"{crashed} crashed, " if crashed else "none crashed, ") + \
        f"{len(low)} ended more than {FAILED_POINTS:g} points below the stem's baseline recipe ({baseline:.1f} %): {ended}"


def crash_verdict(paper_value: str, status, top1, chance: float, no_crash_here: str = "", curves=None,
                  baseline: float | None = None) -> dict:
    """Verdict of a row's stability claim: the paper prints ``crash`` (the run diverges) or a number
    (it trains). ``status``: our runs' ``ok`` / ``crash``; ``top1``: their top-1 (crashes ignored).
    "crash" is reproduced when every run crashed, not reproduced when none did and they trained; a
    number the other way round. Runs that neither crashed nor learned (within
    DID_NOT_TRAIN_POINTS of chance) did not train: no verdict; a row with some crashes is inconclusive.
    ``no_crash_here``: why this scale does not crash where the paper's reference configuration does
    (e.g. :func:`vitmlp.experiment.crash_regime`); then a printed ``crash`` that trains here is
    inconclusive, not refuted (a run that cannot diverge at this scale says nothing about one that does).
    ``curves``: the runs' curves, where kept: a run that did not crash and whose train loss ended less than
    DID_NOT_TRAIN_LOSS below its first epoch's did not train either (:func:`stalled`).
    ``baseline``: the stem's mean top-1 at the baseline recipe, for a row at that rate or above: a run that
    ended more than FAILED_POINTS below it failed like a crash (:func:`failed`); None: only crashes."""
    status, top1 = list(status), list(top1)
    baseline = None if baseline is None or did_not_train([baseline], chance) else baseline
    crashed, n = sum(s == "crash" for s in status), len(status)
    fails = failed(status, top1, baseline)
    far = [i for i, (s, f) in enumerate(zip(status, fails)) if f and s == "ok"]   # failed without crashing
    low = [top1[i] for i in far]
    ok = [t for s, t in zip(status, top1) if s == "ok"]
    flat = curves is not None and _flat([c for s, c in zip(status, curves) if s == "ok"]).any()
    paper_crash = str(paper_value).strip() == "crash"
    if n == 0:
        return {"verdict": INCONCLUSIVE, "why": "no runs"}
    rising = None if curves is None else [list(curves)[i] for i in far]
    if all(fails):
        v = REPRODUCED if paper_crash else NOT_REPRODUCED
        why = f"all {n} runs failed: {_failed_why(crashed, low, baseline, rising)}" if low else f"all {n} runs crashed"
    elif any(fails):
        v, why = INCONCLUSIVE, f"{crashed} of {n} runs crashed" if not low else \
            f"{sum(fails)} of {n} runs failed: {_failed_why(crashed, low, baseline, rising)}"
    elif did_not_train(ok, chance):
        v, why = INCONCLUSIVE, f"no crash, but {untrained_why(chance)}"
    elif flat:
        v, why = INCONCLUSIVE, f"no crash, but {STALLED_WHY})"
    elif paper_crash and no_crash_here:
        v, why = INCONCLUSIVE, f"none of {n} runs crashed, but {no_crash_here}"
    else:
        v, why = (NOT_REPRODUCED if paper_crash else REPRODUCED), f"none of {n} runs crashed" + (
            "" if baseline is None else f" or ended more than {FAILED_POINTS:g} points below the stem's baseline recipe "
                                        f"({baseline:.1f} %)")
    return {"verdict": v, "why": why}


def outcome(status, top1, crash_step) -> str:
    """A row's cell as the paper prints it: ``81.2 ± 0.3`` (mean ± std of the runs that trained),
    ``crash (step 37)`` when every run crashed (steps of each run), or both when some did."""
    status, top1, steps = list(status), list(top1), list(crash_step)
    ok = _clean([t for s, t in zip(status, top1) if s == "ok"])
    where = ", ".join(str(int(s)) for st_, s in zip(status, steps) if st_ == "crash")
    crash = f"crash (step{'s' if ',' in where else ''} {where})" if where else ""
    acc = f"{ok.mean():.1f}" + (f" ± {ok.std(ddof=1):.1f}" if len(ok) > 1 else "") if len(ok) else ""
    return "; ".join(x for x in (acc, crash) if x) or "no runs"


def seed_summary(runs: pd.DataFrame, by="label", chance: float | None = None) -> pd.DataFrame:
    """One row per group of runs (run_table rows, ``by`` a column or list of columns): runs planned,
    recorded and crashed; of the finished ones, how many did not train, top-1 per seed, mean, std,
    how far each train loss fell and the mean last-quarter gain (empty where none finished)."""
    ok = runs[runs.status == "ok"]
    chance = chance if chance is not None else (chance_level(ok) or 10.0)
    keys = [by] if isinstance(by, str) else list(by)

    def row(key, g):   # key: a tuple, grouped by a list
        t = g[g.status == "ok"]
        top = t.final_top1.astype(float)
        return {**dict(zip(keys, key)),
                "planned": len(g), "recorded": int((g.status != "missing").sum()), "crashed": int((g.status == "crash").sum()),
                "did not train": int(untrained_runs(t, chance).sum()) if len(t) else None,
                "top-1 per seed": ", ".join(f"{x:.1f}" for x in top),
                "mean": top.mean() if len(t) else None, "std": top.std() if len(t) > 1 else None,
                "train loss fell": ", ".join(f"{loss_fall(c):.0%}" for c in t.curves) if "curves" in t else "",
                "last-quarter gain": late_gain(t).mean() if len(t) and "curves" in t else None}
    return pd.DataFrame([row(k, g) for k, g in runs.groupby(keys, sort=False)])


def claimed(verdicts: pd.Series) -> pd.Series:
    """The verdicts of rows that make a claim: not a shown row's "" nor compare's baseline row."""
    return verdicts[~verdicts.isin(["", BASELINE])]


def counts(rows: pd.DataFrame) -> str:
    """'6 reproduced, 5 inconclusive at this scale, 3 not reproduced (of 14 rows)'."""
    v = claimed(rows.verdict).value_counts()
    return ", ".join(f"{n} {k}" for k, n in v.items()) + f" (of {int(v.sum())} rows)"


# --- the table of a reduced item: the paper's rows beside ours ----------------------------------
def beyond_noise(a, b) -> bool:
    """True when the 95 % Welch interval of ``mean(b) - mean(a)`` excludes 0 (needs 2+ seeds each)."""
    d = welch(a, b)
    return not math.isnan(d.lo) and (d.lo > 0 or d.hi < 0)


def compare(df: pd.DataFrame, paper: dict, base: str, metric: str = "final_top1", *, margin: float = 1.0,
            equal_within: float = 0.5, claim: str | None = None, doubled: pd.DataFrame | None = None,
            own_schedule=(), numbers: bool = False) -> pd.DataFrame:
    """The paper's table beside ours, as differences to a baseline row.

    paper: arm label -> the paper's value (same units as ``metric``; None where the paper prints nothing,
    e.g. an arm this book adds; a word of DIRECTIONS where its text states only the direction against the
    baseline); base: the baseline's label. One row per label of ``paper``: paper value and difference, ours
    (mean, std over seeds), our difference with its 95 % interval, seeds, crashes, the smallest difference
    the row can detect (``MDE``, 80 % power), and the row's verdict with its reason (:func:`row_verdict`;
    a paper difference within ``equal_within`` claims "about the same", judged within +-``margin``).
    claim=NOT_HIGHER: the text says "no better than the baseline" of every row, whatever their printed
    difference (shown beside): judged as that one-sided claim within ``margin``.

    The plateau (top-1 rows whose runs keep their curves, :func:`at_plateau`): a row, the baseline
    included, whose runs still rose by more than PLATEAU_POINTS over their last quarter of epochs is
    read from ``doubled`` (the arms at 2x, 4x, 8x the epochs: :func:`at_plateau`) where all its seeds are there
    and at their plateau, else the rows it takes part in are inconclusive and say why. A baseline row
    read at the profile's epochs gives its longer runs' mean where other rows read it so.
    own_schedule: labels of rows whose shorter schedule is what they test (a short schedule is the
    claim's own setting, still rising by design): no plateau rule for them.
    numbers: also the 95 % interval as numbers (``ci_lo``, ``ci_hi``), the narrowest equivalence margin its 90 %
    interval lies inside (``certifies ±``) and the rows read from longer runs (``read at 2x``: labels, "; ", 4x/8x named)."""
    if claim not in (None, NOT_HIGHER):
        raise ValueError(f"unknown claim {claim!r}; valid choices: None, {NOT_HIGHER!r}")
    crashes = df[df.status == "crash"].groupby("label").size()
    chance = chance_level(df, metric)
    pb = paper.get(base)
    rows, base_longer, own_longer = [], {}, False
    for label, pv in paper.items():
        read, unsettled, reads = at_plateau(df, [base, label], doubled, metric, own_schedule)
        b, ours = (pd.Series(read[read.label == k][metric].to_numpy(), dtype=float) for k in (base, label))
        if label == base:
            own_longer = base in reads   # its own row reads it longer already: nothing to add to it
        elif base in reads:
            base_longer[_times([reads[base]])] = b
        word = pv if isinstance(pv, str) else None
        if word is not None:
            check_choice("paper direction", word, list(DIRECTIONS))
        d_paper = None if word is not None or pv is None or pb is None else round(float(pv) - float(pb), 2)
        said = DIRECTIONS[word] if word is not None else (   # the text's words win
            claim if claim is not None and d_paper is not None else d_paper)
        j = judged(said, b, ours, equal_within=equal_within, margin=margin, chance=chance, unsettled=unsettled,
                   untrained=stalled(read, [base, label]), reads=reads)
        d = welch(b, ours) if numbers else None
        rows.append({"row": label, "paper": pv, "paper Δ": d_paper,
                     "ours": round(ours.mean(), 2) if len(ours) else math.nan,
                     "± std": round(ours.std(ddof=1), 2) if len(ours) > 1 else math.nan,
                     "ours Δ": round(j["ours Δ"], 2),
                     "95% CI": "" if label == base else j["95% CI"], "MDE": "" if label == base else j["MDE"],
                     "seeds": len(ours), "crashes": int(crashes.get(label, 0)),
                     "verdict": BASELINE if label == base else j["verdict"],
                     "why": "" if label == base else j["why"],
                     "p_paper": j["p_paper"], "p_other": j["p_other"],
                     **({"ci_lo": d.lo, "ci_hi": d.hi, "certifies ±": max(abs(x) for x in d.interval(0.90)),
                         "read at 2x": "; ".join(k if _times([t]) == 2 else f"{k} ({_times([t])}x)" for k, t in reads.items())} if numbers else {})})
    out = pd.DataFrame(rows)
    if base_longer and not own_longer:   # its own row shows the profile's epochs; say what the rows read longer compare with
        out.loc[out.row == base, "why"] = "; ".join(_baseline_at(t, b) for t, b in sorted(base_longer.items()))
    return out


def _baseline_at(times: int, top1: pd.Series) -> str:
    spread = f" ± {top1.std(ddof=1):.2f}" if len(top1) > 1 else ""
    return f"at {times}x epochs {top1.mean():.2f}{spread} ({len(top1)} seeds): what the rows read at {times}x compare with"


def _times(reads) -> int:
    """The longest schedule, as a multiple of the profile's, that plateau reads (:func:`_plateau`'s texts) name."""
    return max((int(m) for t in reads for m in re.findall(r"\bat (\d+)x\b", t)), default=2)


def compare_pairs(df: pd.DataFrame, pairs: list[tuple], metric: str = "final_top1", **kwargs) -> pd.DataFrame:
    """:func:`compare` for rows that each have their own baseline (a figure's pairs, a table's
    ablations): ``pairs`` = [(claim, base label, other label, paper's base value, paper's other value)];
    where the paper prints no values, (claim, base, other, None, direction), a word of DIRECTIONS.
    One row per pair: the claim, ``row`` (the other), ``vs`` (its base), compare's columns with its
    ``numbers`` (the interval as numbers; ``certifies ±``: what an "about the same" pair could claim;
    the rows read at their plateau from 2x runs). Each pair is judged on its own rows (a chance level
    per data set).
    ``kwargs`` go to compare (``margin``, ``doubled``, ``own_schedule``...)."""
    out = []
    for claim, base, other, paper_base, paper_other in pairs:
        if base == other:
            raise ValueError(f"pair {claim!r} compares {base!r} with itself")
        said = isinstance(paper_other, str)   # the text's direction instead of printed values
        pair = df[df.label.isin([base, other])]   # its own chance level: rows of two data sets have two
        t = compare(pair, {base: None if said else paper_base, other: paper_other}, base=base, metric=metric,
                    numbers=True, **kwargs)
        row = t[t.row == other].copy()
        row.insert(0, "claim", claim)
        row.insert(2, "vs", base)
        out.append(row)
    return pd.concat(out, ignore_index=True)


def seed_differences(df: pd.DataFrame, base: str, other: str, label: str, metric: str = "final_top1",
                     doubled: pd.DataFrame | None = None, own_schedule=(), together=()) -> pd.DataFrame:
    """Runs of ``other`` minus runs of ``base`` with the same seed, as rows of a run table labelled
    ``label``, so that two such differences (parallel minus sequential at two depths) can be compared
    by :func:`compare_pairs`. Each row is read at its plateau (:func:`at_plateau`, from ``doubled``
    where it still rose); what that said rides along (``unsettled``, ``plateau_reads``), so a claim
    on the differences is as settled as their rows. ``together``: the rows of the other differences
    the claim compares this one with, read at one schedule with this pair (a gain read at 2x epochs
    beside one read at the profile's would compare two schedules). Only seeds where both ran ``ok``;
    none when either row did not train (within DID_NOT_TRAIN_POINTS of chance, or :func:`stalled`).
    A difference has no chance level."""
    group = sorted({base, other, *together}) if together else [base, other]   # one order per group: its reason said once
    read, unsettled, reads = at_plateau(df, group, doubled, metric, own_schedule)
    reads = {k: t for k, t in reads.items() if k in (base, other)}
    chance = chance_level(df, metric)
    a, b = (read[read.label == x].set_index("seed")[metric] for x in (base, other))
    if why_untrained(read, [base, other], chance, metric):
        a = a.iloc[:0]
    seeds = sorted(set(a.index) & set(b.index))
    how = "; ".join(f"{k}: {t}" for k, t in reads.items()) or None
    return pd.DataFrame({"label": label, "seed": seeds, "status": "ok", metric: [b[s] - a[s] for s in seeds],
                         "unsettled": unsettled, "plateau_reads": how},
                        columns=["label", "seed", "status", metric, "unsettled", "plateau_reads"])


def rising(df: pd.DataFrame, metric: str = "final_top1", longer: pd.DataFrame | None = None) -> list[str]:
    """Labels of ``df`` (run_table rows) whose runs still rose by more than PLATEAU_POINTS over their
    last quarter of epochs, or whose runs at twice the schedule (``longer``, all of them recorded)
    gained more than that on average: the arms a notebook plans again at twice the epochs for :func:`compare`."""
    ok = df[df.status == "ok"]
    late, grew = _label_gains(ok, metric), _doubling_gains(ok, longer, metric)
    return [x for x in dict.fromkeys(ok.label) if max(late.get(x, 0), grew.get(x, 0)) > PLATEAU_POINTS]


def _label_gains(ok: pd.DataFrame, metric: str) -> dict:
    """label -> mean late gain of its runs; empty where the runs keep no curves or ``metric`` has none."""
    if metric != "final_top1" or "curves" not in ok or not len(ok):
        return {}
    return late_gain(ok).groupby(ok.label.to_numpy(), sort=False).mean().dropna().to_dict()


def _doubling_gains(now: pd.DataFrame, longer: pd.DataFrame | None, metric: str) -> dict:
    """label -> what twice the schedule added to its mean ``metric``, for the rows of ``now`` whose runs
    all have their twin in ``longer`` (ok runs of both). A row level over its last quarter can still
    gain several points from twice the epochs (Three Things Table 7's Linear stem: +1.7 over its
    last quarter of 48 epochs, then 4.3 points higher at 96)."""
    if metric != "final_top1" or longer is None or not len(longer) or not len(now):
        return {}
    longer = longer[longer.status == "ok"] if "status" in longer else longer
    n, m = now.label.value_counts(), longer.label.value_counts()
    mean = lambda t, x: t.loc[t.label == x, metric].mean()   # noqa: E731
    return {x: mean(longer, x) - mean(now, x) for x in n.index if m.get(x, 0) >= n[x]}


def _pts(g) -> str:   # a gain in points; two decimals where one would print the plateau threshold itself
    return f"{g:+.2f}" if round(g, 1) == PLATEAU_POINTS else f"{g:+.1f}"


def _still(label, g) -> str:
    return f"{label} still rose {_pts(g)} points over the last quarter of its epochs (more than {PLATEAU_POINTS:g})"


class _Climb:
    """A claim's rows at 1x, 2x, 4x... the profile's schedule (:func:`_plateau`): ``ok``, their runs at
    1x; ``twins``, at 2**``doublings`` times it; ``hist``, each row's mean last-quarter gain per
    schedule (NaN: not all its runs there, or no curves; a row without curves is level at 1x)."""

    def __init__(self, labels, ok: pd.DataFrame, twins: pd.DataFrame, metric: str, own):
        self.ok, self.twins, self.metric = ok, twins, metric
        self.n = {x: int((ok.label == x).sum()) for x in labels}
        self.active = [x for x in dict.fromkeys(labels) if x not in own and self.n[x]]   # a row against itself: once
        self.hist = {x: [self.late(x, 0)] for x in self.active}

    def runs(self, lab, d):
        t = self.ok if d == 0 else self.twins[self.twins.doublings == d]
        return t[t.label == lab]

    def late(self, lab, d):
        mine = self.runs(lab, d)
        return _label_gains(mine, self.metric).get(lab, math.nan if d else 0.0) if len(mine) >= self.n[lab] else math.nan

    def grew(self, lab, d):   # what doubling from 2**d times the schedule added to its mean: NaN unless all runs are at both
        mine = self.runs(lab, d)
        return (_doubling_gains(mine, self.runs(lab, d + 1), self.metric).get(lab, math.nan)
                if len(mine) >= self.n[lab] else math.nan)

    def rising(self, lab, d) -> bool:
        return self.hist[lab][d] > PLATEAU_POINTS or self.grew(lab, d) > PLATEAU_POINTS

    def grown(self, lab, i) -> str:   # a level last quarter that twice the epochs still beat
        g = self.grew(lab, i)
        return f" but {2 ** (i + 1)}x epochs added {_pts(g)} (more than {PLATEAU_POINTS:g})" if g > PLATEAU_POINTS >= self.hist[lab][i] else ""

    def climbed(self, lab) -> str:   # what its runs showed so far, for a reason
        g = self.hist[lab]
        first = _still(lab, g[0]) if g[0] > PLATEAU_POINTS else f"{lab} was level at the profile's epochs ({_pts(g[0])})" + self.grown(lab, 0)
        return first + "".join(f"; at {2 ** i}x epochs " + (f"still {_pts(x)}" if x > PLATEAU_POINTS else "not read"
                                                            if math.isnan(x) else f"level ({_pts(x)})" + self.grown(lab, i))
                               for i, x in enumerate(g[1:-1] if math.isnan(g[-1]) else g[1:], 1))

    def shown(self, lab, last) -> str:   # its gains up to 2**last times the schedule (NaN: a schedule it skipped while another climbed)
        g = self.hist[lab]
        return ((f"the profile's epochs still rose {_pts(g[0])}" if g[0] > PLATEAU_POINTS
                 else f"level at the profile's epochs ({_pts(g[0])})") + self.grown(lab, 0)
                + "".join(f"; at {2 ** i}x {_pts(g[i])}" + self.grown(lab, i) for i in range(1, last + 1) if not math.isnan(g[i])))


def _plateau(labels, ok: pd.DataFrame, twins: pd.DataFrame, metric: str, own=()) -> tuple[str | None, dict, int]:
    """(why the rows ``labels`` one claim reads are not at their plateau, or None; {label: what its
    longer runs showed} for each row read from its twins instead; the doublings they are read at).
    ``ok``: the rows' runs at the profile's schedule; ``twins``: their runs at 2**``doublings`` times it.
    A row climbs to twice its schedule, up to MAX_DOUBLINGS, while it still rises there: by more than
    PLATEAU_POINTS over its last quarter of epochs, or, where its runs at twice that schedule are all
    there, by more than that from the doubling (:func:`_doubling_gains`). Where the climbing rows level,
    every row is read at that schedule (one schedule per comparison: a row level by the last-quarter
    rule can still gain several points from twice the epochs, as the SGD rows of ResMLP's D.1), and
    one that rises there climbs on. The claim is read where no row rises and each has all its runs,
    else it is unsettled, and why. A row level below that schedule needs no runs between
    (``experiment.plateau_twins`` trains none). Rows in ``own`` (their schedule is the claim) and
    rows without runs are read as they are."""
    c = _Climb(labels, ok, twins, metric, own)
    d, pushed, n, hist = 0, [], c.n, c.hist
    while risers := [x for x in pushed if c.rising(x, d)] or [x for x in c.active if c.rising(x, d)]:
        if d == MAX_DOUBLINGS:   # the climbers; once they level, any row is read there
            return "; ".join(c.climbed(x) + f" (the check doubles at most {MAX_DOUBLINGS} times)" for x in risers), {}, 0
        d, pushed, why = d + 1, risers, []
        for x in c.active:
            hist[x].append(c.late(x, d))
            if math.isnan(hist[x][-1]) and x in risers:
                k = len(c.runs(x, d))
                why.append(c.climbed(x) + (f"; the {2 ** d}x-epochs check has {k} of {n[x]} runs" if k < n[x]
                                           else f"; its {2 ** d}x runs keep no curves"))
        if why:
            return "; ".join(why), {}, 0
    if not d:
        return None, {}, 0
    f, at_f = 2 ** d, ", ".join(pushed)
    why = [f"{at_f} is read at {f}x epochs, so {x} is too (one schedule per comparison): "
           + (f"its {f}x-epochs runs number {len(c.runs(x, d))} of {n[x]}" if len(c.runs(x, d)) < n[x] else f"its {f}x runs keep no curves")
           for x in c.active if math.isnan(hist[x][d])]
    if why:
        return "; ".join(why), {}, 0
    return None, {x: c.shown(x, d) if x in pushed else f"{c.shown(x, d - 1)}, read at {f}x beside {at_f}; at {f}x {_pts(hist[x][d])}"
                  for x in sorted(c.active, key=lambda x: x not in pushed)}, d   # the rows that climbed first


def _doublings(ok: pd.DataFrame, twins: pd.DataFrame) -> pd.Series:
    """How many times each twin doubled its row's schedule (``schedule``: a run's steps where it sets
    them, else its epochs); 1 where the runs do not say (a table made by hand)."""
    if "schedule" not in twins or "schedule" not in ok:
        return pd.Series(1, index=twins.index, dtype=int)
    base = twins.label.map(ok.groupby("label").schedule.first())
    return np.log2(twins.schedule / base).round().fillna(1).astype(int)


def at_plateau(df: pd.DataFrame, labels, doubled: pd.DataFrame | None = None, metric: str = "final_top1",
               own_schedule=()) -> tuple[pd.DataFrame, str | None, dict]:
    """The runs of the rows ``labels`` that one claim reads, each row at its plateau, as :func:`compare`
    reads its rows: (the ok runs read, of df or ``doubled``; why the rows are not at their plateau, or
    None, for :func:`judged`'s ``unsettled``; {label: what its twins showed} for :func:`judged`'s
    ``reads``). A row still rising is read from ``doubled``, the 2x (4x, 8x) epochs twins that
    :func:`experiment.plateau_twins` plans, where they settle it. own_schedule: labels whose shorter
    schedule is what they test (still rising by design): read as they are. Rows made of runs
    (:func:`seed_differences`) carry what their runs' plateau said in ``unsettled``/``plateau_reads``."""
    ok = df[df.status == "ok"]
    twins = doubled[doubled.status == "ok"] if doubled is not None and len(doubled) else ok.iloc[:0]
    twins = twins.assign(doublings=_doublings(ok, twins))
    unsettled, reads, d = _plateau(labels, ok, twins, metric, set(own_schedule))
    read = pd.concat([ok[ok.label.isin(set(labels) - set(reads))], twins[twins.label.isin(set(reads)) & (twins.doublings == d)].drop(columns="doublings")])
    mine = ok[ok.label.isin(labels)]
    carried = list(mine.unsettled.dropna().unique()) if "unsettled" in mine else []
    if "plateau_reads" in mine:
        reads |= {lab: t for lab, t in zip(mine.label, mine.plateau_reads) if pd.notna(t)}
    return read, "; ".join([*carried, unsettled] if unsettled else carried) or None, reads


def judged(paper_delta, base, other, *, equal_within: float = 0.5, margin: float = 1.0,
           chance: float | None = None, unsettled: str | None = None, untrained: str | None = None,
           reads: dict | None = None, digits: int = 1) -> dict:
    """:func:`row_verdict` with what a page prints beside its verdict: our difference, its 95 %
    interval and the smallest difference the row can detect (``MDE``, 80 % power), both to ``digits``
    decimals (1 for top-1 points, 3 for a score between 0 and 1); the difference is not rounded, so
    a text that prints it rounds once. ``unsettled``, ``reads``: what :func:`at_plateau` said of the rows
    (the reason names the rows it read from their longer runs)."""
    b, o = pd.Series(base, dtype=float), pd.Series(other, dtype=float)
    v = row_verdict(paper_delta, b, o, equal_within=equal_within, margin=margin, chance=chance,
                    unsettled=unsettled, untrained=untrained, digits=digits)
    n = min(len(o), len(b))
    spread = math.sqrt((o.var(ddof=1) + b.var(ddof=1)) / 2) if n > 1 else math.nan
    return {"ours Δ": o.mean() - b.mean() if len(o) else math.nan,
            "95% CI": "" if math.isnan(v["ci_lo"]) else f"[{v['ci_lo']:+.{digits}f}, {v['ci_hi']:+.{digits}f}]",
            "MDE": round(mde(spread, n), digits), "verdict": v["verdict"],
            "why": v["why"] + (f"; read at {_times(reads.values())}x epochs (" + "; ".join(f"{k}: {t}" for k, t in reads.items()) + ")"
                               if reads else ""),
            "p_paper": v["p_paper"], "p_other": v["p_other"]}


# --- measured items: the paper's ordering of rows is the claim ---------------------------------
RANK_AGREES, RANK_DISAGREES = 0.8, 0.5   # Spearman thresholds, fixed before measuring


def ordering(rows, measured, paper) -> dict:
    """How well ``measured`` orders ``rows`` as ``paper`` does: Spearman's rho (NaN under 3 rows),
    the pairs in the opposite order, and the verdict: reproduced at rho >= RANK_AGREES, not
    reproduced below RANK_DISAGREES, else inconclusive."""
    rows, m, p = list(rows), np.asarray(measured, dtype=float), np.asarray(paper, dtype=float)
    if not len(rows) == len(m) == len(p):
        raise ValueError(f"ordering needs one measured and one paper value per row; got {len(rows)} rows, "
                         f"{len(m)} measured, {len(p)} paper values")
    rho = round(float(st.spearmanr(m, p).statistic), 9) if len(rows) > 2 else math.nan  # 0.8 stays 0.8
    swapped = [f"{rows[i]} vs {rows[j]}" for i in range(len(rows)) for j in range(i + 1, len(rows))
               if np.sign(m[i] - m[j]) * np.sign(p[i] - p[j]) < 0]
    verdict = (INCONCLUSIVE if math.isnan(rho) else REPRODUCED if rho >= RANK_AGREES
               else NOT_REPRODUCED if rho < RANK_DISAGREES else INCONCLUSIVE)
    return {"spearman": rho, "swapped_pairs": len(swapped), "of_pairs": len(rows) * (len(rows) - 1) // 2,
            "swapped": ", ".join(swapped) or "none", "verdict": verdict}
