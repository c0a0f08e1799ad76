"""Run records: stable hashes, atomic writes, where files go, the DataFrame view, provenance."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from vitmlp import records as R
from vitmlp.train import TrainConfig


def test_canonical_json_and_hash_are_stable():
    a = {"b": [1.5, "x"], "a": 1, "c": {"z": None, "y": True}}
    b = {"c": {"y": True, "z": None}, "a": 1, "b": [1.5, "x"]}
    assert R.canonical_json(a) == '{"a":1,"b":[1.5,"x"],"c":{"y":true,"z":null}}' == R.canonical_json(b)
    # pinned: changing the hashing would orphan every committed record
    assert R.config_hash(a) == R.config_hash(b) == "2f3c7a05abcf6cfc"
    assert R.config_hash({**a, "a": 2}) != R.config_hash(a)
    with pytest.raises(ValueError):
        R.canonical_json({"lr": float("nan")})


def test_train_config_hash_covers_non_default_fields_only():
    cfg = TrainConfig(model="vit_S", lr=5e-4, seed=3)
    assert cfg.hashed_dict() == {"model": "vit_S", "lr": 5e-4, "seed": 3}
    assert R.config_hash(cfg) == R.config_hash({"model": "vit_S", "lr": 5e-4, "seed": 3}) == "66ade26847278ac5"
    # a value equal to the default is the same run as leaving it out; device never counts
    assert R.config_hash(cfg.replace(epochs=10, device="cpu")) == R.config_hash(cfg)
    assert R.config_hash(cfg.replace(epochs=11)) != R.config_hash(cfg)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "sub" / "r.json"
    R.atomic_write_json(path, {"v": 1})
    assert json.loads(path.read_text()) == {"v": 1}

    def half_then_fail(f):
        f.write(b'{"v": 2, "trunc')
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        R._atomic(path, half_then_fail)
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left behind


def test_where_records_and_checkpoints_go(tmp_path, monkeypatch):
    for var in ("VITMLP_RECORDS", "VITMLP_RESULTS", "VITMLP_CACHE"):
        monkeypatch.delenv(var, raising=False)
    assert R.records_dir() == R.repo_root() / "results" / "runs"
    assert R.cache_dir() == R.Path.home() / ".cache" / "vitmlp" / "runs"
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "res"))
    assert R.records_dir() == tmp_path / "res" / "runs"
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "recs"))
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "cache"))
    assert R.records_dir() == tmp_path / "recs" and R.records_dir(tmp_path / "x") == tmp_path / "x"
    assert R.run_cache("abc") == tmp_path / "cache" / "runs" / "abc"


def _record(model, top1, status="ok", seed=0):
    cfg = TrainConfig(model=model, seed=seed)
    return {"hash": R.config_hash(cfg), "status": status, "profile": cfg.profile, "config": cfg.to_dict(),
            "num_classes": 10, "metrics": {"final_top1": top1}, "curves": {"val_top1": [top1]}}


def test_save_load_and_dataframe(tmp_path):
    assert R.load_record("nope", tmp_path) is None
    assert R.load_records(tmp_path).empty
    recs = [_record("vit_S", 50.0), _record("mixer_S", 40.0), _record("mixer_S", None, status="crash", seed=1)]
    for r in recs:
        R.save_record(r, tmp_path)
    assert R.load_record(recs[0]["hash"], tmp_path)["metrics"]["final_top1"] == 50.0
    df = R.load_records(tmp_path)
    assert list(df["hash"]) == sorted(r["hash"] for r in recs)
    assert {"config.model", "metrics.final_top1", "curves.val_top1", "status"} <= set(df.columns)
    mixer = R.load_records(tmp_path, config__model="mixer_S", status="ok")
    assert list(mixer["metrics.final_top1"]) == [40.0]
    with pytest.raises(ValueError, match="no column 'config.modle'"):
        R.load_records(tmp_path, config__modle="x")
    with pytest.raises(ValueError, match="status must be one of"):
        R.save_record(_record("x", 1.0, status="running"), tmp_path)
    assert not (tmp_path / "d4.json").exists()


def test_provenance_names_machine_commit_and_versions():
    p = R.provenance()
    assert p["machine"]["cores"] >= 1 and p["machine"]["torch_threads"] >= 1 and p["machine"]["cpu"]
    assert set(p["versions"]) >= {"python", "torch", "timm", "numpy"}
    commit = p["git"]["commit"]
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}", commit)
    assert p["git"]["dirty"] in (True, False, None)


def test_a_cpu_is_named_with_its_generation_from_the_first_processor_only():
    two = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 1\n"
           "model name\t: AMD EPYC\nflags\t\t: fpu avx2\n\nprocessor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\n")
    assert R.cpu_identity(two) == {"cpu": "AMD EPYC", "cpu_id": "family 23 model 1"}
    assert R.cpu_identity("processor\t: 0\nmodel name\t: Some ARM core\n") == {"cpu": "Some ARM core"}
    assert R.cpu_identity("")["cpu"]   # no /proc/cpuinfo: the platform's processor or machine name


def test_a_commit_is_dirty_where_code_or_inputs_changed_not_where_only_outputs_did(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    for f in ("src/m.py", "results/item.csv", "book/page.ipynb"):
        (tmp_path / f).parent.mkdir(exist_ok=True)
        (tmp_path / f).write_text("a\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    monkeypatch.setattr(R, "repo_root", lambda: tmp_path)
    assert R._git()["dirty"] is False
    (tmp_path / "results/item.csv").write_text("b\n")   # an item re-run before its result is committed
    (tmp_path / "book/page.ipynb").write_text("b\n")
    assert R._git()["dirty"] is False
    (tmp_path / "src/m.py").write_text("b\n")
    assert R._git()["dirty"] is True


def test_a_staged_file_waiting_for_a_live_runner_is_never_stale(tmp_path, monkeypatch):
    # the runner swaps a notebook's items in when the notebook ends, maybe hours after they were staged
    import subprocess
    import sys
    import time as _time
    from vitmlp.records import OWNER_ENV, STALE_TMP_S, clean_stale_tmp, stage
    old = _time.time() - 2 * STALE_TMP_S
    monkeypatch.setenv(OWNER_ENV, str(os.getpid()))
    live = stage(tmp_path / "table2.csv", lambda f: f.write(b"a"))
    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout.strip()
    monkeypatch.setenv(OWNER_ENV, dead_pid)
    orphan = stage(tmp_path / "table3.csv", lambda f: f.write(b"b"))
    legacy = tmp_path / ".last.pt.x1y2.tmp"   # a name without an owner: judged by age
    legacy.write_bytes(b"c")
    monkeypatch.delenv(OWNER_ENV)
    fresh = stage(tmp_path / "figure1.png", lambda f: f.write(b"d"))   # owned by this process, young
    for p in (live, orphan, legacy):
        os.utime(p, (old, old))
    assert live.name.split(".")[-3] == str(os.getpid())
    assert sorted(clean_stale_tmp(tmp_path)) == sorted([orphan, legacy])
    assert live.exists() and fresh.exists() and not orphan.exists()
