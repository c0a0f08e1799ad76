"""``make bench``: each mode trains in its own precision, and the table is saved with provenance.

Timings themselves are never asserted (they belong to the benchmark's output, not to tests).
"""
import dataclasses
import json

import pandas as pd

from vitmlp import bench, profiles
from vitmlp.records import cpu_capability
from vitmlp.train import trainer


def _bench(monkeypatch, tmp_path, native: bool):
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "cache"))
    # a profile whose precision is "auto" (as cpu's): the "fp32" modes must still train in fp32
    smoke = profiles.PROFILES["smoke"]
    monkeypatch.setitem(profiles.PROFILES, "smoke", dataclasses.replace(smoke, recipe={**smoke.recipe, "precision": "auto"}))
    monkeypatch.setattr(bench, "cpu_capability", lambda: {"isa": "AVX-512 BF16" if native else "AVX2", "bf16": native})
    monkeypatch.setattr(trainer, "native_bf16", lambda device: native)   # in this process
    seen = []
    real = bench.train
    monkeypatch.setattr(bench, "MODELS", {"ResMLP-S12": ("resmlp_S12", {})})
    # "compile fp32" is left out (slow to compile), but a mode whose runs hash as eager's (compile is not in
    # the hash) must train too, not read the eager row's record
    modes = {k: v for k, v in bench.MODES.items() if k != "compile fp32"}
    monkeypatch.setattr(bench, "MODES", {**modes, "eager fp32, again": {"precision": "fp32"}})
    timings = []  # the store of each timing, in the order taken (the parallel mode's trains in workers)
    real_parallel = bench.parallel_rate
    monkeypatch.setattr(bench, "parallel_rate", lambda cfg, own, n: timings.append(own) or real_parallel(cfg, own, n))
    monkeypatch.setattr(bench, "train", lambda cfg, **kw: timings.append(kw["records"][:-len("/rec")])
                        or seen.append((cfg.precision, cfg.compile)) or real(cfg, **kw))
    bench.main(["--profile", "smoke", "--steps", "6", "--rounds", "2"])
    # the modes in turn, then in reverse order: a shared machine's drifting load falls on all of them
    taken = [f"ResMLP-S12-{mode}-0" for mode in bench.MODES if native or "bf16" not in mode]
    assert [t.rsplit("/", 1)[1] for t in timings] == taken + [t[:-1] + "1" for t in reversed(taken)]
    # one table per kind of CPU, so the appendix keeps the slower kind's beside the faster one's
    return seen, pd.read_csv(tmp_path / "appendix" / f"bench-{'avx512-bf16' if native else 'avx2'}.csv")


def test_bench_modes_set_their_precision_and_the_table_is_saved(monkeypatch, tmp_path):
    seen, table = _bench(monkeypatch, tmp_path, native=True)
    # two rounds, the second in reverse order (the parallel mode's runs are in worker processes)
    assert seen == [("fp32", False), ("bf16", False), ("fp32", False)] * 2
    assert list(table["mode"]) == ["eager fp32", "eager bf16", "profile's precision, 2 runs x 1 thread",
                                   "eager fp32, again"]
    # the workers see this machine's real capability: "auto" is bf16 only where it is native
    assert list(table.precision[:2]) == ["fp32", "bf16"]
    assert table.precision[2] == ("bf16" if cpu_capability()["bf16"] else "fp32")
    assert (table.images_per_s > 0).all() and (table.data_share > 0).all()   # values: timings, not asserted
    assert table["range"].str.fullmatch(r"\d+-\d+").all()   # each row: the median of its rounds, and their range
    side = json.loads((tmp_path / "appendix" / "bench-avx512-bf16.json").read_text())
    assert side["profile"] == "smoke" and "GFLOP/s" in side["summary"] and side["git"]["commit"]
    assert "native bf16: yes" in side["summary"] and side["name"] == "bench-avx512-bf16"


def test_bench_skips_bf16_without_native_support(monkeypatch, tmp_path):
    seen, table = _bench(monkeypatch, tmp_path, native=False)
    assert ("bf16", False) not in seen and "eager bf16" not in set(table["mode"])
    assert set(table.precision) == {"fp32"} or cpu_capability()["bf16"]
