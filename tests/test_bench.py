"""``make bench``: each mode trains in its own precision, and the table is saved with provenance.

Timings themselves are never asserted (they belong to the benchmark's output, not to tests).
"""
import dataclasses
import json

import pandas as pd

from vitmlp import bench, profiles


def test_bench_modes_set_their_precision_and_the_table_is_saved(monkeypatch, tmp_path):
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "cache"))
    # a profile whose default for ResMLP is bf16: the "fp32" modes must still train in fp32
    monkeypatch.setitem(profiles.PROFILES, "smoke", dataclasses.replace(
        profiles.PROFILES["smoke"], family_recipe={"resmlp": {"precision": "bf16"}}))
    seen = []
    real = bench.train
    monkeypatch.setattr(bench, "train", lambda cfg, **kw: seen.append((cfg.precision, cfg.compile)) or real(cfg, **kw))
    monkeypatch.setattr(bench, "MODELS", {"ResMLP-S12": ("resmlp_S12", {})})
    modes = {k: v for k, v in bench.MODES.items() if k != "compile fp32"}
    monkeypatch.setattr(bench, "MODES", modes)
    bench.main(["--profile", "smoke", "--steps", "6"])
    assert seen == [("fp32", False), ("bf16", False)]    # (the parallel mode's runs are in worker processes)
    table = pd.read_csv(tmp_path / "appendix" / "bench.csv")
    assert list(table["mode"]) == list(modes) and list(table.precision) == ["fp32", "bf16", "bf16"]
    assert (table.images_per_s > 0).all() and (table.data_share > 0).all()   # values: timings, not asserted
    side = json.loads((tmp_path / "appendix" / "bench.json").read_text())
    assert side["profile"] == "smoke" and "GFLOP/s" in side["summary"] and side["git"]["commit"]
