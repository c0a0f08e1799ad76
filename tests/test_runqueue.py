"""The queue runner for a GPU machine, exercised on the CPU with smoke-sized runs: what a notebook
would train is collected without training, a queue trains into one archive within a time budget,
unfinished runs resume from the archive to the metrics of an uninterrupted run, and merging makes
the notebook's runs cached."""
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from vitmlp import runqueue
from vitmlp.experiment import STOP_GRACE_S, Arm, plan, run, training_time
from vitmlp.records import config_hash, load_record, rebuild_notes, records_dir, results_root, this_hardware
from vitmlp.results import REPO
from vitmlp.train import train


@pytest.fixture
def one_thread(monkeypatch):
    monkeypatch.setenv("VITMLP_PROGRESS", "0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _members(archive):
    with runqueue._open_archive(archive) as tar:
        return sorted(tar.getnames())


def test_queue_trains_into_one_archive_and_merge_makes_runs_cached(tmp_path, one_thread):
    (_, teacher), = plan("smoke", [Arm("teacher", "vit_S")], seeds=1)
    runs = plan("smoke", [Arm("student", "resmlp_S12", overrides={"distill": "hard", "teacher": config_hash(teacher)})],
                seeds=2)
    queue = runqueue.write_queue(tmp_path / "q.json", [c for _, c in runs] + [teacher, teacher])
    cfgs, weights = runqueue.read_queue(queue)
    assert len(cfgs) == 3 and weights == {config_hash(teacher)}   # a repeated config once; the teacher's weights

    out = tmp_path / "gpu" / "runs.tar.gz"
    m = runqueue.train_queue(queue, out, budget=600, parallel=1, records=tmp_path / "gpu_rec",
                             cache=tmp_path / "gpu_cache")
    assert m["trained"] == 3 and m["unfinished"] == [] and m["crashed"] == 0
    hashes = [config_hash(c) for c in cfgs]
    assert _members(out) == sorted([f"runs/{h}.json" for h in hashes] + [f"cache/{config_hash(teacher)}/model.pt",
                                                                          "manifest.json"])
    # home: nothing trained yet (but a rebuild of the teacher's weights); after the merge the notebook's
    # runs are all cached, with the teacher's own weights
    rebuilt = tmp_path / "home_cache" / config_hash(teacher) / "rebuilt.json"
    rebuilt.parent.mkdir(parents=True)
    rebuilt.write_text("{}")
    counts = runqueue.merge(out, records=tmp_path / "home", cache=tmp_path / "home_cache")
    assert counts == {"records": 3, "kept_existing": 0, "checkpoints": 1}
    assert not rebuilt.exists()
    def trains(*_):
        raise AssertionError("a merged run was trained again")
    df = run(runs, parallel=1, records=tmp_path / "home", cache=tmp_path / "home_cache", callback=trains)
    gpu = [load_record(h, tmp_path / "gpu_rec") for h in df.hash]
    assert df.final_top1.tolist() == [r["metrics"]["final_top1"] for r in gpu]
    assert (tmp_path / "home_cache" / config_hash(teacher) / "model.pt").exists()
    assert runqueue.merge(out, records=tmp_path / "home", cache=tmp_path / "home_cache")["kept_existing"] == 3


def test_a_queue_rebuilds_the_weights_an_analysis_asks_for_and_brings_them_back(tmp_path, one_thread, capsys):
    """A run recorded long ago whose weights no cache holds any more (an analysis notebook noted them
    in a collect): the queue trains them again after its new runs, the archive carries them with the
    note that they are a rebuild, and after the merge the analysis loads them without training."""
    from vitmlp.train.trainer import load_weights, rebuilt_weights
    cfg = plan("smoke", [Arm("analysed", "mixer_S16", overrides={"epochs": 2})], seeds=1)[0][1]
    h = config_hash(cfg)
    rec = train(cfg, records=tmp_path / "rec", cache=tmp_path / "old_cache")
    own = torch.load(tmp_path / "old_cache" / h / "model.pt", weights_only=True)
    new = plan("smoke", [Arm("new", "resmlp_S12", overrides={"epochs": 1})], seeds=1)[0][1]
    queue = runqueue.write_queue(tmp_path / "q.json", [cfg, new], weights=[h])   # what the collects wrote

    out = tmp_path / "gpu" / "runs.tar.gz"
    m = runqueue.train_queue(queue, out, budget=600, parallel=1, records=tmp_path / "rec", cache=tmp_path / "gpu_cache")
    assert m["trained"] == 1 and m["already_recorded"] == 1 and m["unfinished"] == []
    # the bar counts the rebuild as a job (it read 2/2 runs, 100 %, while the rebuild had not begun)
    bar = [s for s in capsys.readouterr().err.split("\r") if s.startswith("runs")]
    assert "runs + rebuilds:  33%" in bar[0] and "1/3" in bar[0] and "100%" in bar[-1] and "3/3" in bar[-1]
    assert _members(out) == sorted([f"cache/{h}/model.pt", f"cache/{h}/rebuilt.json", "manifest.json",
                                    f"runs/{config_hash(new)}.json"])
    # the new run went first (a teacher's rebuild would have: its students wait for it); the records'
    # "created" have whole seconds, the files' times nanoseconds
    from vitmlp.records import record_path
    rebuilt_at = (tmp_path / "gpu_cache" / h / "model.pt").stat().st_mtime_ns
    assert rebuilt_at > record_path(config_hash(new), tmp_path / "rec").stat().st_mtime_ns

    counts = runqueue.merge(out, records=tmp_path / "rec", cache=tmp_path / "home_cache")
    assert counts == {"records": 0, "kept_existing": 1, "checkpoints": 2}
    note = rebuilt_weights(h, tmp_path / "home_cache")
    assert note is not None and note["record"]["final_top1"] == rec["metrics"]["final_top1"]
    # the note is kept with the records too (a cache is one machine's), once however often it is merged
    assert rebuild_notes(tmp_path / "rec") == [{"hash": h, **note}]
    for _ in range(2):
        runqueue.merge(out, records=tmp_path / "other_store", cache=tmp_path / "other_cache")
    assert rebuild_notes(tmp_path / "other_store") == [{"hash": h, **note}]
    model = load_weights(h, records=tmp_path / "rec", cache=tmp_path / "home_cache")   # nothing trained here
    assert all(torch.equal(v, own[k]) for k, v in model.state_dict().items())   # same machine and threads
    # the page that reads them says they are a rebuild; a page that only reads the run's numbers does not
    kw = dict(records=tmp_path / "rec", cache=tmp_path / "home_cache")
    read = training_time(run([("analysed", cfg)], need_weights=True, **kw), cache=kw["cache"])
    assert read.endswith(f". Run {h[:8]}'s weights were rebuilt on {this_hardware()} in {rec['precision']} (top-1 "
                         f"{rec['metrics']['final_top1']:.1f} %), its record trained on {this_hardware()} in "
                         f"{rec['precision']} (top-1 {rec['metrics']['final_top1']:.1f} %); this page reads it")
    assert "rebuilt" not in training_time(run([("analysed", cfg)], **kw), cache=kw["cache"])


def test_budget_stops_runs_with_a_checkpoint_and_resume_ends_as_uninterrupted(tmp_path, one_thread):
    long = plan("smoke", [Arm("long", "resmlp_S12", overrides={"epochs": 160, "batch_size": 8})], seeds=1)[0][1]
    h = config_hash(long)
    t0 = time.time()
    whole = train(long, records=tmp_path / "r3", cache=tmp_path / "c3")
    took = time.time() - t0
    # the deadline falls halfway through the run on this machine (not before 10 s: a worker's
    # start-up, torch's import, must be over for it to catch the stop and save a checkpoint)
    # a second run waits for the only worker: at the deadline it is not started (it used to start,
    # stop at once and put an empty checkpoint in the archive)
    short = plan("smoke", [Arm("short", "mixer_S16", overrides={"epochs": 1})], seeds=1)[0][1]
    queue = runqueue.write_queue(tmp_path / "q.json", [long, short])
    first = tmp_path / "first.tar.gz"
    m = runqueue.train_queue(queue, first, budget=runqueue.PACK_S + STOP_GRACE_S + max(took / 2, 10), parallel=1,
                             records=tmp_path / "r1", cache=tmp_path / "c1")
    assert m["trained"] == 0 and m["unfinished"] == [h, config_hash(short)], f"the run took {took:.0f} s alone"
    assert _members(first) == sorted([f"cache/{h}/last.pt", "manifest.json"])
    assert not (tmp_path / "c1" / config_hash(short)).exists()
    # a second call, on a fresh machine, continues from the archive
    m2 = runqueue.train_queue(queue, tmp_path / "second.tar.gz", budget=900, parallel=2, resume=first,
                              records=tmp_path / "r2", cache=tmp_path / "c2")
    assert m2["trained"] == 2
    resumed = load_record(h, tmp_path / "r2")
    assert resumed["curves"]["train_loss"] == whole["curves"]["train_loss"]
    assert resumed["metrics"]["final_top1"] == whole["metrics"]["final_top1"]
    # home merges the archives as they come back: the finished run's record clears the checkpoint the
    # first one brought (a rebuild of the run's weights would have resumed from it, another machine's state)
    home = dict(records=tmp_path / "home", cache=tmp_path / "home_cache")
    runqueue.merge(first, **home)
    assert (tmp_path / "home_cache" / h / "last.pt").exists()
    runqueue.merge(tmp_path / "second.tar.gz", **home)
    assert load_record(h, home["records"]) is not None and not (tmp_path / "home_cache" / h / "last.pt").exists()


def test_a_rebuild_the_budget_stops_comes_back_unfinished_and_resumes_to_the_whole_rebuild(tmp_path, one_thread):
    """Rebuilds go in the queue's order, and one stopped at the deadline is listed unfinished with its
    checkpoint (a lent GPU's call once dropped a rebuild at 42 of 48 epochs, saying nothing)."""
    from vitmlp.train.trainer import load_weights
    long = plan("smoke", [Arm("long", "resmlp_S12", overrides={"epochs": 160, "batch_size": 8})], seeds=1)[0][1]
    other = plan("smoke", [Arm("other", "mixer_S16", overrides={"epochs": 1})], seeds=1)[0][1]
    h, o = config_hash(long), config_hash(other)
    t0 = time.time()
    train(long, records=tmp_path / "rec", cache=tmp_path / "old_cache")
    took = time.time() - t0
    train(other, records=tmp_path / "rec", cache=tmp_path / "old_cache")
    whole = torch.load(tmp_path / "old_cache" / h / "model.pt", weights_only=True)
    # the queue names the long rebuild first: it starts first, whatever the hashes' order
    queue = runqueue.write_queue(tmp_path / "q.json", [long, other], weights=[h, o])
    first = tmp_path / "first.tar.gz"
    m = runqueue.train_queue(queue, first, budget=runqueue.PACK_S + STOP_GRACE_S + max(took / 2, 10), parallel=1,
                             records=tmp_path / "rec", cache=tmp_path / "c1")
    assert m["already_recorded"] == 2 and m["unfinished"] == [h, o], f"the rebuild took {took:.0f} s alone"
    assert _members(first) == sorted([f"cache/{h}/last.pt", "manifest.json"])
    m2 = runqueue.train_queue(queue, tmp_path / "second.tar.gz", budget=900, parallel=1, resume=first,
                              records=tmp_path / "rec", cache=tmp_path / "c2")
    assert m2["unfinished"] == []
    model = load_weights(h, records=tmp_path / "rec", cache=tmp_path / "c2")
    assert all(torch.equal(v, whole[k]) for k, v in model.state_dict().items())


def test_merge_refuses_a_record_that_does_not_hash_to_its_name(tmp_path, one_thread):
    cfg = plan("smoke", [Arm("a", "mixer_S16")], seeds=1)[0][1]
    rec = train(cfg, records=tmp_path / "r", cache=tmp_path / "c")
    rec["config"]["lr"] = 0.5      # the config no longer hashes to the file's name
    (tmp_path / "r" / f"{rec['hash']}.json").write_text(json.dumps(rec))
    runqueue.pack(tmp_path / "bad.tar.gz", [rec["hash"]], (), (), records=tmp_path / "r")
    with pytest.raises(SystemExit, match="hashes to .*, not to its name"):
        runqueue.merge(tmp_path / "bad.tar.gz", records=tmp_path / "home")
    assert not (tmp_path / "home").exists() or not list((tmp_path / "home").glob("*.json"))


def test_collect_notes_a_notebooks_runs_and_trains_nothing(tmp_path, monkeypatch, sandbox):
    from vitmlp.run import NOTEBOOKS
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "records"))
    stops = runqueue.collect([NOTEBOOKS / "appendix" / "dataset.ipynb"], {"profile": "smoke"}, tmp_path / "q.json")
    cfgs, _ = runqueue.read_queue(tmp_path / "q.json")
    arms = [Arm("ViT-S", "vit_S"), Arm("ResMLP-S12", "resmlp_S12"), Arm("Mixer-S/16", "mixer_S16"),
            Arm("bag of patches", "resmlp_S12", {"cross_patch": "none"})]
    expected = {config_hash(c) for _, c in plan("smoke", arms)}
    assert expected <= {config_hash(c) for c in cfgs}
    assert not list((tmp_path / "records").glob("*.json"))            # nothing was trained
    assert "collected" in list(stops.values())[0] and "error" not in list(stops.values())[0]


def test_a_collect_ends_a_notebook_at_its_runs_not_in_an_error_on_queued_rows(tmp_path, monkeypatch, sandbox):
    """Scaled ReLU Table 1 read the queued rows' numbers and stopped with an IndexError: the stop at
    `run` is the expected one, an error is a fault."""
    from vitmlp.run import NOTEBOOKS
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "records"))
    nb = NOTEBOOKS / "scaled-relu" / "table1_stability.ipynb"
    stops = runqueue.collect([nb], {"profile": "smoke"}, tmp_path / "q.json")
    assert stops[str(nb)].startswith("stopped at cell") and "collected" in stops[str(nb)], stops
    assert "error" not in stops[str(nb)]
    assert runqueue.read_queue(tmp_path / "q.json")[0]                 # its runs were noted


def test_a_collect_reads_each_profiles_records_where_it_found_them(tmp_path, monkeypatch):
    """The appendix's gpu calibration, re-executed in collect mode, read the gpu runs from the cpu
    store (the collect had pointed every store at the one it collects for) and found none."""
    from vitmlp.results import device_twins, records_for
    monkeypatch.delenv("VITMLP_RESULTS", raising=False)
    monkeypatch.delenv("VITMLP_RECORDS", raising=False)
    cpu, gpu, twins = records_for("cpu").resolve(), records_for("gpu").resolve(), device_twins().resolve()
    assert len({cpu, gpu, twins}) == 3
    for k, v in runqueue.collect_env("cpu", tmp_path / "q.json", tmp_path / "scratch").items():
        monkeypatch.setenv(k, v)
    assert records_for("gpu") == gpu and records_for("cpu") == cpu and device_twins() == twins
    assert records_dir() == cpu and results_root() == (tmp_path / "scratch").resolve()   # its runs; its items to scratch


def test_collect_writes_no_result_item(tmp_path, monkeypatch, sandbox):
    """A collect executes notebooks: the items they save go to a scratch folder, never to results/
    (the regression: a collect at `cpu` rewrote ResMLP items from half-run notebooks)."""
    from vitmlp.run import NOTEBOOKS
    results = sandbox / "results"
    (results / "runs").mkdir(parents=True)
    before = os.environ.get("VITMLP_RESULTS")
    runqueue.collect([NOTEBOOKS / "resmlp" / "figure1_architecture.ipynb"], {"profile": "smoke"}, tmp_path / "q.json")
    assert [p.name for p in results.rglob("*") if p.is_file()] == []
    assert os.environ.get("VITMLP_RESULTS") == before and runqueue.COLLECT_ENV not in os.environ
    # asked to keep them (scripts/check_reexecution.py compares them with the committed ones)
    kept = tmp_path / "kept"
    stops = runqueue.collect([NOTEBOOKS / "resmlp" / "figure1_architecture.ipynb"], {"profile": "smoke"},
                             tmp_path / "q2.json", results=kept)
    assert list(stops.values()) == ["complete"]
    assert {p.name for p in (kept / "resmlp").iterdir()} >= {"figure1.schematic.json", "figure1.schematic.png"}
    assert [p.name for p in results.rglob("*") if p.is_file()] == []


def test_an_archive_larger_than_one_returned_file_comes_in_parts_that_merge_joins(tmp_path, monkeypatch):
    out = tmp_path / "runs.tar.gz"
    note = os.urandom(2000).hex()                       # does not compress: about 2 kB of archive
    monkeypatch.setattr(runqueue, "PART_BYTES", 500)
    runqueue.pack(out, [], [], [], manifest={"note": note})
    names = sorted((p.name for p in tmp_path.iterdir()), key=lambda n: int(n.rsplit("part", 1)[1]))
    assert not out.exists() and len(names) >= 4 and names == [f"runs.tar.gz.part{i}" for i in range(len(names))]
    assert all((tmp_path / n).stat().st_size == 500 for n in names[:-1])
    for named in (out, tmp_path / names[1]):           # the archive's name, or one of its parts
        with runqueue._open_archive(named) as tar:
            assert json.loads(tar.extractfile("manifest.json").read())["note"] == note
    assert runqueue.merge(out, records=tmp_path / "r", cache=tmp_path / "c")["records"] == 0
    (tmp_path / names[1]).unlink()                      # a lost part is refused, not half merged
    with pytest.raises(SystemExit, match="not part0"):
        runqueue.merge(out, records=tmp_path / "r", cache=tmp_path / "c")
    for n in names[2:]:
        (tmp_path / n).unlink()
    monkeypatch.setattr(runqueue, "PART_BYTES", 10**6)  # a later pack that fits one file leaves no stale part
    runqueue.pack(out, [], [], [], manifest={"note": "small"})
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["runs.tar.gz"]


def test_bad_arguments_are_refused(tmp_path):
    (tmp_path / "q.json").write_text("[]")
    with pytest.raises(SystemExit, match="not a queue file"):
        runqueue.read_queue(tmp_path / "q.json")
    with pytest.raises(SystemExit, match="--budget"):
        runqueue.main(["train", str(tmp_path / "q.json"), "--budget", "0"])
    with pytest.raises(SystemExit, match="--limit-mib"):
        runqueue.main(["train", str(tmp_path / "q.json"), "--limit-mib", "0"])


def test_collect_never_rebuilds_missing_weights_of_a_recorded_run(tmp_path, monkeypatch, one_thread):
    """A recorded run whose model.pt (or per-epoch snapshots) is not cached: outside a collect the
    weights are rebuilt by training; in a collect the run is noted and the notebook stops, untrained."""
    from vitmlp.analysis import book_snapshots
    from vitmlp.train.trainer import _final_state
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "r"))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "c"))
    cfg = plan("smoke", [Arm("a", "resmlp_S12", overrides={"epochs": 2})], seeds=1)[0][1]
    rec = train(cfg)          # book_snapshots would need epoch1.pt too: never kept by a plain run
    (tmp_path / "c" / "runs" / rec["hash"] / "model.pt").unlink()
    monkeypatch.setenv(runqueue.COLLECT_ENV, str(tmp_path / "q.json"))
    for needs_weights in (lambda: _final_state(rec["hash"]), lambda: book_snapshots(cfg)):
        with pytest.raises(runqueue.Collected, match="weights needed"):
            needs_weights()
    assert not (tmp_path / "c" / "runs" / rec["hash"] / "model.pt").exists()      # nothing was trained
    cfgs, weights = runqueue.read_queue(tmp_path / "q.json")
    assert weights == {rec["hash"]} and [config_hash(c) for c in cfgs] == [rec["hash"]]


def test_a_collect_trains_a_scratch_check_but_no_run_of_the_store(tmp_path, monkeypatch, one_thread):
    """A notebook's check trained into a folder of its own (Mixer Figure 4's fp32 updates) runs in a
    collect, so the notebook re-executes; the same config into the store is noted, untrained."""
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "r"))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv(runqueue.COLLECT_ENV, str(tmp_path / "q.json"))
    cfg = plan("smoke", [Arm("a", "resmlp_S12")], seeds=1)[0][1].replace(steps=3)
    rec = train(cfg, records=tmp_path / "scratch", cache=tmp_path / "scratch")
    assert rec["status"] == "ok" and not (tmp_path / "q.json").exists()
    for store in (None, tmp_path / "r"):   # the store, by default or by name
        with pytest.raises(runqueue.Collected, match="not recorded"):
            train(cfg, records=store)
    assert load_record(config_hash(cfg), tmp_path / "r") is None
    assert [config_hash(c) for c in runqueue.read_queue(tmp_path / "q.json")[0]] == [config_hash(cfg)]


def test_collect_never_trains_an_unrecorded_run_an_analysis_asks_for(tmp_path, monkeypatch):
    """analysis.book_models trains a missing run outside a collect; in a collect it notes the run and
    its weights and stops the notebook, with nothing trained."""
    from vitmlp.analysis import book_models
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "r"))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv(runqueue.COLLECT_ENV, str(tmp_path / "q.json"))
    cfg = plan("smoke", [Arm("a", "resmlp_S12", overrides={"epochs": 2})], seeds=1)[0][1]
    with pytest.raises(runqueue.Collected, match="not recorded"):
        book_models(cfg)
    h = config_hash(cfg)
    assert not (tmp_path / "r" / f"{h}.json").exists() and not (tmp_path / "c" / "runs" / h).exists()
    cfgs, weights = runqueue.read_queue(tmp_path / "q.json")
    assert weights == {h} and [config_hash(c) for c in cfgs] == [h]


def test_a_collect_notes_every_weight_an_analysis_will_read_at_once(tmp_path, monkeypatch, one_thread):
    """An analysis of three runs, two of them recorded with their weights gone and one not recorded:
    run(..., need_weights=True) in a collect notes all three weights before the notebook stops (it
    used to stop at the first weights asked for, so a queue brought back one model per collect)."""
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "r"))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "c"))
    runs = plan("smoke", [Arm("a", "resmlp_S12", overrides={"epochs": 1})], seeds=3)
    for _, cfg in runs[:2]:
        (tmp_path / "c" / "runs" / train(cfg)["hash"] / "model.pt").unlink()
    monkeypatch.setenv(runqueue.COLLECT_ENV, str(tmp_path / "q.json"))
    assert run(runs[:2]).status.tolist() == ["ok", "ok"]        # the numbers alone: no weights asked for
    with pytest.raises(runqueue.Collected, match="weights of 3 run"):
        run(runs, need_weights=True)
    _, weights = runqueue.read_queue(tmp_path / "q.json")
    assert weights == {config_hash(c) for _, c in runs}
    assert not (tmp_path / "r" / f"{config_hash(runs[2][1])}.json").exists()   # nothing trained


def test_collect_stops_a_timing_notebook_at_its_first_timing(tmp_path, monkeypatch):
    """Timing notebooks train nothing: a collect must not spend minutes timing models."""
    import torch
    from vitmlp.measure import paired_throughput, throughput
    model = torch.nn.Conv2d(3, 4, 3)
    assert throughput(model, batch=1, img_size=8, warmup=0, min_time=0.0) > 0   # outside a collect: measured
    monkeypatch.setenv(runqueue.COLLECT_ENV, str(tmp_path / "q.json"))
    for timing in (lambda: throughput(model, batch=1, img_size=8), lambda: paired_throughput(model, {"a": lambda m: m}, 1, 8)):
        with pytest.raises(runqueue.Collected, match="nothing to train"):
            timing()
    assert not (tmp_path / "q.json").exists()


def test_a_collect_notes_every_weight_fit_gaps_needs_at_once(tmp_path, monkeypatch):
    from vitmlp.analysis import fit_gaps
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "r"))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(runqueue.COLLECT_ENV, str(tmp_path / "q.json"))
    cfgs = [c for _, c in plan("smoke", [Arm("a", "resmlp_S12"), Arm("b", "mixer_S16")], seeds=2)]
    cached = tmp_path / "cache" / "runs" / config_hash(cfgs[0]) / "model.pt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"weights")            # this run's weights are at hand: not asked for
    with pytest.raises(runqueue.Collected, match="weights"):
        fit_gaps(cfgs)
    queued, weights = runqueue.read_queue(tmp_path / "q.json")
    assert weights == {config_hash(c) for c in cfgs[1:]} and len(queued) == 3


def test_records_of_a_gpu_queue_go_where_the_gpu_profiles_notebooks_read_them(tmp_path, monkeypatch, one_thread):
    """vitmlp.run --profile gpu reads records beside the profile's results (results/profiles/gpu/runs):
    train and merge use that store for a gpu queue, the book's for a cpu one; a queue of two profiles
    without --records is refused."""
    import vitmlp.results as results
    from vitmlp.train import TrainConfig
    for var in ("VITMLP_RECORDS", "VITMLP_RESULTS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(results, "results_root", lambda: tmp_path / "results")
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "c"))
    smoke = plan("smoke", [Arm("a", "resmlp_S12", overrides={"epochs": 1})], seeds=1)[0][1]
    as_gpu = TrainConfig.from_dict({**smoke.to_dict(), "profile": "gpu"})
    as_cpu = TrainConfig.from_dict({**smoke.to_dict(), "profile": "cpu"})
    with pytest.raises(SystemExit, match="several profiles"):
        runqueue.train_queue(runqueue.write_queue(tmp_path / "mixed.json", [as_gpu, as_cpu]), tmp_path / "m.tar.gz",
                             budget=600, parallel=1)
    out = tmp_path / "gpu.tar.gz"
    runqueue.train_queue(runqueue.write_queue(tmp_path / "q.json", [as_gpu]), out, budget=600, parallel=1)
    gpu_store = tmp_path / "results" / "profiles" / "gpu" / "runs"
    assert load_record(config_hash(as_gpu), gpu_store) is not None
    (gpu_store / f"{config_hash(as_gpu)}.json").unlink()
    assert runqueue.merge(out)["records"] == 1 and (gpu_store / f"{config_hash(as_gpu)}.json").exists()
    assert not (tmp_path / "results" / "runs").exists()


def test_collect_takes_notebook_parameters_and_refuses_unknown_ones(tmp_path, monkeypatch, sandbox):
    """A part of an item can be queued (`-p archs '[S/16]'`); a name the notebook does not declare, or
    the profile given as a parameter, is refused before any kernel starts."""
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "records"))
    q = tmp_path / "q.json"
    for bad, message in ((["-p", "nope", "1"], "unknown parameter"), (["-p", "profile", "cpu"], "--profile")):
        with pytest.raises(SystemExit, match=message):
            runqueue.main(["collect", "--paper", "appendix", "--item", "dataset", "--profile", "smoke", "-o", str(q), *bad])
        assert not q.exists()
    runqueue.main(["collect", "--paper", "appendix", "--item", "dataset", "--profile", "smoke", "-o", str(q),
                   "-p", "seeds", "[1]"])
    cfgs, _ = runqueue.read_queue(q)
    assert cfgs and {c.seed for c in cfgs} == {1}


def test_a_compiled_queue_trains_the_same_runs_by_hash(tmp_path, one_thread):
    """``train --compile`` runs through torch.compile: the records keep their hashes (a notebook finds
    them cached) and say how they were trained."""
    runs = plan("smoke", [Arm("S12", "resmlp_S12")], seeds=1)
    queue = runqueue.write_queue(tmp_path / "q.json", [c for _, c in runs])
    m = runqueue.train_queue(queue, tmp_path / "c.tar.gz", budget=600, parallel=1, records=tmp_path / "rec",
                             cache=tmp_path / "cache", compile=True)
    assert m["trained"] == 1
    rec = load_record(config_hash(runs[0][1]), tmp_path / "rec")
    assert rec["status"] == "ok" and rec["config"]["compile"] is True and not runs[0][1].compile


def test_a_collect_notes_the_runs_a_skip_read_lacks_and_lets_the_notebook_go_on(tmp_path, monkeypatch, capsys):
    """missing="skip" is written for rows without a record: in a collect they are queued, and the
    notebook goes on as it would on a laptop (a re-execution check reaches its end)."""
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "r"))
    monkeypatch.setenv(runqueue.COLLECT_ENV, str(tmp_path / "q.json"))
    runs = plan("smoke", [Arm("a", "resmlp_S12")], seeds=2)
    df = run(runs, missing="skip")
    assert df.status.tolist() == ["missing", "missing"]
    said = capsys.readouterr()   # counted in the run's log (stderr), which the book's pages leave out
    assert said.out == "" and said.err.startswith("2 of 2 runs have no record and were not trained")
    assert {config_hash(c) for c in runqueue.read_queue(tmp_path / "q.json")[0]} == {config_hash(c) for _, c in runs}
    with pytest.raises(runqueue.Collected, match="2 of 2 runs noted"):
        run(runs)


def test_a_pool_rebuilds_a_shared_teachers_missing_weights_once_before_its_students(tmp_path, one_thread, monkeypatch):
    """Two students of a recorded teacher whose weights this cache lacks: one job rebuilds them, and
    the students start after it (each used to rebuild the teacher at the same time)."""
    from concurrent.futures import Future
    from vitmlp import experiment
    kw = {"records": tmp_path / "r", "cache": tmp_path / "c"}
    (_, teacher), = plan("smoke", [Arm("teacher", "vit_S")], seeds=1)
    t = config_hash(teacher)
    train(teacher, **kw)
    (tmp_path / "c" / t / "model.pt").unlink()
    students = [c for _, c in plan("smoke", [Arm("student", "resmlp_S12",
                                                  overrides={"distill": "hard", "teacher": t})], seeds=2)]
    jobs = []

    class InProcess:   # a pool that runs each job as it is submitted, in this process
        _processes = {}

        def submit(self, fn, job, **k):
            jobs.append(job if isinstance(job, str) else config_hash(job))
            f = Future()
            f.set_result(fn(job, **k))
            return f

        def shutdown(self, **_):
            pass
    monkeypatch.setattr(experiment, "worker_pool", lambda n: InProcess())
    # a run that needs no teacher, queued first, does not hold the rebuild up (the pool's own queue did:
    # on a lent GPU the rebuild started after the 580 runs queued before it, past the call's deadline)
    (_, other), = plan("smoke", [Arm("other", "mixer_S16")], seeds=1)
    df = run([("other", other)] + [("student", c) for c in students], parallel=2, **kw)
    assert jobs == [t, config_hash(other)] + [config_hash(c) for c in students]
    df = df[df.label == "student"]
    rec = load_record(t, kw["records"])
    top1 = rec["metrics"]["final_top1"]   # rebuilt as trained: on the same machine, the same weights
    assert [r[t]["rebuilt"]["final_top1"] for r in df.rebuilt_weights] == [top1] * 2
    assert (f"Run {t[:8]}'s weights were rebuilt on {this_hardware()} in {rec['precision']} (top-1 {top1:.1f} %)"
            in training_time(df))
    assert training_time(df).endswith(f"; runs {', '.join(h[:8] for h in df.hash)} loaded that rebuild")
    other = df.iloc[:1].assign(hash="0" * 16, rebuilt_weights=[{t: {**df.rebuilt_weights.iloc[0][t], "created": "later"}}])
    # the same weights rebuilt twice alike (two calls of one GPU kind): one sentence that says so
    both = training_time(pd.concat([df, other]))
    assert both.count(f"Run {t[:8]}'s weights were rebuilt") == 1 and f"(2 rebuilds, top-1 {top1:.1f}, {top1:.1f} %)" in both
    assert both.endswith(f"; runs {', '.join(h[:8] for h in df.hash)}, 00000000 loaded those rebuilds")


def test_weights_rebuilt_alike_are_said_in_one_sentence(tmp_path):
    """An analysis page reading six rebuilt weights said six near-identical sentences."""
    from vitmlp.records import run_cache

    def note(top1):
        return {"rebuilt": {"hardware": "NVIDIA H200", "precision": "bf16", "final_top1": top1},
                "record": {"hardware": "AVX2", "precision": "fp32", "final_top1": 97.0}, "created": "t"}
    for h, top1 in (("a" * 16, 96.6), ("b" * 16, 96.04)):
        run_cache(h, tmp_path).mkdir(parents=True)
        (run_cache(h, tmp_path) / "rebuilt.json").write_text(json.dumps(note(top1)))
    df = pd.DataFrame({"hash": ["a" * 16, "b" * 16, "c" * 16], "reads_weights": True, "cores": 2, "threads": 1,
                       "wall_time_s": 60.0, "gpu": None})
    assert training_time(df, cache=tmp_path).endswith(
        "(3 runs, from their records; cached runs are not retrained). The weights of runs aaaaaaaa, bbbbbbbb were "
        "rebuilt on NVIDIA H200 in bf16 (top-1 96.6, 96.0 %), their records trained on AVX2 in fp32 (top-1 97.0, "
        "97.0 %); this page reads them")
    # two teachers rebuilt alike, each loaded by its own students: one sentence each, saying whose
    students = pd.DataFrame({"hash": ["d" * 16, "e" * 16], "cores": 2, "threads": 1, "wall_time_s": 60.0, "gpu": None,
                             "rebuilt_weights": [{"a" * 16: note(96.6)}, {"b" * 16: note(96.04)}]})
    said = training_time(students)
    assert said.count(" were rebuilt on NVIDIA H200") == 2
    assert "Run aaaaaaaa's weights" in said and "; run dddddddd loaded that rebuild" in said
    assert said.endswith("; run eeeeeeee loaded that rebuild")


def test_a_gpu_call_trains_its_three_lanes_into_files_the_lent_machine_returns(tmp_path):
    """scripts/gpu_call.sh as the lent machine runs it (here on the CPU): the gpu queue, the cpu backlog and
    the weights queue side by side, each into its own archive; what comes back is at most 8 files of at
    most 16 MiB (64 MiB together) with plain names, and each archive merges into its lane's records."""
    gpu, backlog, analysed = (plan("smoke", [Arm(name, "resmlp_S12", overrides={"epochs": 1, "lr": lr})], seeds=1)[0][1]
                              for name, lr in (("gpu", 1e-3), ("backlog", 2e-3), ("analysed", 3e-3)))
    queues = {name: runqueue.write_queue(tmp_path / f"{name}.json", [cfg], weights=[config_hash(cfg)] * (name == "w"))
              for name, cfg in (("gpu", gpu), ("cpu", backlog), ("w", analysed))}
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "BUDGET": "300", "QUEUE": str(queues["gpu"]), "GPU_PARALLEL": "1",
           "BACKLOG": str(queues["cpu"]), "BACKLOG_PARALLEL": "1", "WEIGHTS": str(queues["w"]), "WEIGHTS_PARALLEL": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
           "VITMLP_RECORDS": str(tmp_path / "gpu_rec"), "VITMLP_CACHE": str(tmp_path / "gpu_cache"), "VITMLP_PROGRESS": "0"}
    done = subprocess.run(["bash", "scripts/gpu_call.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == ["cpu.log", "cpu.tar.gz", "gpu.tar.gz", "train.log", "w.log", "w.tar.gz"], files
    sizes = [(out / f).stat().st_size for f in files]
    assert len(files) <= 8 and max(sizes) <= 16 * 2**20 and sum(sizes) <= 64 * 2**20
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files)
    assert "== cpu.log" in done.stdout and "== w.log" in done.stdout
    for archive, cfg, weights in (("gpu", gpu, 0), ("cpu", backlog, 0), ("w", analysed, 1)):
        counts = runqueue.merge(out / f"{archive}.tar.gz", records=tmp_path / "home", cache=tmp_path / "home_cache")
        assert counts == {"records": 1, "kept_existing": 0, "checkpoints": weights}, archive
        assert load_record(config_hash(cfg), tmp_path / "home")["status"] == "ok"
