"""Fault injection: what a reader types, a full disk, a killed parent or a damaged cache must not
damage the book's files or leave the next run failing on them (issue 14, failures 1-7)."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # ddp_worker, whatever pytest's import mode
from ddp_worker import tiny_data, tiny_model  # noqa: E402
from vitmlp import records as R  # noqa: E402
from vitmlp import results as results_mod  # noqa: E402
from vitmlp import run as runner  # noqa: E402
from vitmlp.data import synthetic  # noqa: E402
from vitmlp.models import create_model  # noqa: E402
from vitmlp.profiles import run_config, seeds  # noqa: E402
from vitmlp.train import TrainConfig, load_weights, train, trainer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TINY = dict(model="tiny_mlp", dataset="tiny", img_size=8, batch_size=32, epochs=2, lr=3e-3)


def _git_status():
    """The work tree's changes, leaving out new run records (training may go on beside the tests)."""
    r = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True)
    if r.returncode:
        return None
    return [line for line in r.stdout.splitlines() if not re.match(r"\?\? results/runs/\w+\.json$", line)]


@pytest.fixture(scope="module", autouse=True)
def _repo_unchanged():
    """After every fault of this module, the work tree is as it was (``git status`` unchanged)."""
    before = _git_status()
    yield
    assert _git_status() == before


def _digest(*folders) -> dict:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for f in folders for p in sorted(Path(f).rglob("*")) if p.is_file()}


def _no_kernel(*a, **k):
    raise AssertionError("a kernel was started")


def _tiny_train(tmp, cfg, **kw):
    return train(cfg, data=tiny_data(), records=tmp / "records", cache=tmp / "cache", progress=False, **kw)


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setattr(trainer, "build_model", tiny_model)
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "default_cache"))
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "default_records"))
    return tmp_path


# --- 1. one source of truth for the profile ---------------------------------------------------
def test_a_second_profile_is_refused_before_a_kernel_and_the_book_is_unchanged(monkeypatch):
    before = _digest(REPO / "results" / "resmlp", REPO / "book" / "resmlp")
    monkeypatch.setattr(runner.pm, "execute_notebook", _no_kernel)
    with pytest.raises(SystemExit, match="--profile, not -p profile"):
        runner.main(["--paper", "resmlp", "--item", "table3", "-p", "profile", "smoke", "-p", "rows", "[S12]"])
    with pytest.raises(SystemExit, match="unknown profile 'laptop'; valid choices: smoke"):
        runner.main(["--paper", "appendix", "--profile", "laptop"])
    assert _digest(REPO / "results" / "resmlp", REPO / "book" / "resmlp") == before


def test_where_an_item_goes_follows_from_its_profile(monkeypatch, tmp_path):
    monkeypatch.delenv("VITMLP_RESULTS", raising=False)
    monkeypatch.setattr(R, "repo_root", lambda: tmp_path)
    table = pd.DataFrame({"a": [1]})
    kw = dict(source="test", table=table, verdict="inconclusive at this scale")
    smoke = results_mod.save_item("resmlp", "Table 3", "reduced", profile="smoke", **kw)
    book = results_mod.save_item("resmlp", "Table 3", "reduced", profile="cpu", **kw)
    assert smoke == tmp_path / "results" / "profiles" / "smoke" / "resmlp" / "table3.reduced.json"
    assert book == tmp_path / "results" / "resmlp" / "table3.reduced.json"
    assert results_mod.results_dir("cpu", "timm").name == "cpu-timm-weights"
    assert R.records_dir() == tmp_path / "results" / "runs"    # records and items: one root
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "elsewhere"))   # read at each call, not at import
    assert R.records_dir() == results_mod.results_dir("smoke") / "runs" == tmp_path / "elsewhere" / "runs"


# --- 2. and 3. whole-item writes ---------------------------------------------------------------
def _save(value):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure()
    plt.plot([0, value])
    out = results_mod.save_item("resmlp", "Table 3", "reduced", profile="smoke", source="test",
                                table=pd.DataFrame({"value": [value]}), figure=fig, verdict="reproduced")
    plt.close(fig)
    return out


def _full_disk_on(suffix, real):
    def stage(path, write):
        if str(path).endswith(suffix):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, write)
    return stage


def test_a_full_disk_mid_item_leaves_the_previous_item_whole(monkeypatch, tmp_path):
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path))
    _save(1)
    before = _digest(tmp_path)
    assert len(before) == 3   # csv, png, json
    monkeypatch.setattr(results_mod, "stage", _full_disk_on(".json", R.stage))  # the last file of the item
    with pytest.raises(OSError, match="No space left"):
        _save(2)
    assert _digest(tmp_path) == before        # no new CSV beside an old sidecar, no temp files left
    monkeypatch.setattr(results_mod, "stage", R.stage)
    _save(3)
    assert pd.read_csv(tmp_path / "resmlp" / "table3.reduced.csv").value.tolist() == [3]


TINY_NOTEBOOK = [
    nbformat.v4.new_code_cell('profile = "smoke"\nvalue = 1', metadata={"tags": ["parameters"]}),
    nbformat.v4.new_code_cell(textwrap.dedent("""\
        import pandas as pd
        from vitmlp.results import save_item
        save_item("resmlp", "Table 3", "reduced", profile=profile, source="test", verdict="reproduced",
                  table=pd.DataFrame({"value": [value]}))
        print("saved", value)""")),
]


def test_a_failed_write_of_the_executed_copy_keeps_the_old_copy_and_item(monkeypatch, tmp_path):
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "results"))
    nb = tmp_path / "notebooks" / "resmlp" / "tiny.ipynb"
    nb.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=TINY_NOTEBOOK, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), nb)
    out = runner.execute(nb, {"profile": "smoke", "value": 1}, tmp_path / "book")
    before = _digest(tmp_path / "results", tmp_path / "book")

    def full_disk(path):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(runner, "compact", full_disk)
    with pytest.raises(OSError, match="No space left"):
        runner.execute(nb, {"profile": "smoke", "value": 2}, tmp_path / "book")
    assert _digest(tmp_path / "results", tmp_path / "book") == before   # readable old copy, old CSV
    assert "saved 1" in nbformat.writes(nbformat.read(out, as_version=4))
    assert not list((tmp_path / "book" / "resmlp").glob(".*"))         # no staging left behind


# --- 4. workers die with their parent ------------------------------------------------------------
POOL_SCRIPT = textwrap.dedent("""\
    import sys
    from vitmlp.experiment import run_pool
    from vitmlp.profiles import run_config
    cfgs = [run_config("smoke", "resmlp_S12", epochs=5000, seed=s) for s in (0, 1, 2, 3)]  # 2 queued behind
    run_pool(cfgs, 2, {"records": sys.argv[1], "cache": sys.argv[2]})
    """)


def _children(pid):
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to find the workers")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_stop_and_exit_when_their_parent_dies(sig, tmp_path):
    env = {**os.environ, "VITMLP_CACHE": str(tmp_path / "cache"), "VITMLP_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    parent = subprocess.Popen([sys.executable, "-c", POOL_SCRIPT, str(tmp_path / "rec"), str(tmp_path / "ck")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.time()   # both runs under way: each has saved a checkpoint
        while len(list((tmp_path / "ck").glob("*/last.pt"))) < 2 and time.time() - t0 < 180:
            assert parent.poll() is None, "the pool ended before the test could kill it"
            time.sleep(0.5)
        workers = _children(parent.pid)
        assert len(workers) >= 2
        os.kill(parent.pid, sig)
        parent.wait(timeout=60)
        t0 = time.time()
        while any(_alive(w) for w in workers) and time.time() - t0 < 60:
            time.sleep(0.5)
        assert not any(_alive(w) for w in workers), "workers outlived their parent"
        assert not list((tmp_path / "rec").glob("*.json"))   # stopped runs leave checkpoints, not records
    finally:
        for p in [parent.pid, *_children(parent.pid)]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


# --- 5. caches are verified ----------------------------------------------------------------------
@pytest.mark.parametrize("content", [
    '{"status":"ok","metrics":{"final_top1":99.9}}',   # forged: no config that hashes to its name
    '{"hash": "',                                       # truncated
])
def test_a_forged_or_truncated_record_is_set_aside_and_the_run_trained(tiny, content):
    h = R.config_hash(TrainConfig(**TINY))
    path = tiny / "records" / f"{h}.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.warns(UserWarning, match=f"{path}: .*moved aside"):
        rec = _tiny_train(tiny, TINY)
    assert rec["status"] == "ok" and rec["metrics"]["final_top1"] != 99.9 and rec["hash"] == h
    assert (tiny / "records" / f"{h}.json.corrupt").read_text() == content
    assert R.load_record(h, tiny / "records") == rec


def test_a_record_of_another_config_is_not_used(tiny):
    other = _tiny_train(tiny, dict(TINY, seed=1))
    h = R.config_hash(TrainConfig(**TINY))
    (tiny / "records" / f"{h}.json").write_text(json.dumps(other))
    with pytest.warns(UserWarning, match="hashes to"):
        assert R.load_record(h, tiny / "records") is None


class Killed(Exception):
    pass


def _kill_after_epoch_1(event, info):
    if event == "epoch" and info["epoch"] == 1:
        raise Killed


def test_a_truncated_checkpoint_is_set_aside_and_the_run_starts_over(tiny):
    whole = _tiny_train(tiny / "whole", TINY)
    with pytest.raises(Killed):
        _tiny_train(tiny, TINY, callback=_kill_after_epoch_1)
    ckpt = tiny / "cache" / whole["hash"] / "last.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    stale = ckpt.with_name(".last.pt.x1y2.tmp")   # what a SIGKILL during a checkpoint write leaves
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 3600,) * 2)
    with pytest.warns(UserWarning, match=f"{ckpt}: unreadable checkpoint"):
        rec = _tiny_train(tiny, TINY)
    assert rec["metrics"] == whole["metrics"] and rec["curves"] == whole["curves"]
    assert not stale.exists()


def test_an_empty_model_file_is_rebuilt(tiny):
    rec = _tiny_train(tiny, TINY)
    path = tiny / "cache" / rec["hash"] / "model.pt"
    good = torch.load(path, weights_only=True)
    path.write_bytes(b"")
    with pytest.warns(UserWarning, match=f"{path}: unreadable checkpoint"):
        model = load_weights(rec["hash"], records=tiny / "records", cache=tiny / "cache", data=tiny_data())
    for k, v in model.state_dict().items():
        assert torch.equal(v, good[k]), k


def test_a_truncated_data_cache_is_regenerated(tmp_path):
    images, labels, _ = synthetic.generate("layout", "val", 64, 16, root=tmp_path)
    [path] = (tmp_path / "embedded").glob("*.pt")
    path.write_bytes(path.read_bytes()[:500])
    with pytest.warns(UserWarning, match=f"{path}: unreadable data cache"):
        again, labels2, _ = synthetic.generate("layout", "val", 64, 16, root=tmp_path)
    assert torch.equal(images, again) and torch.equal(labels, labels2)
    assert synthetic.generate("layout", "val", 64, 16, root=tmp_path)[0].shape == images.shape  # read back


# --- 6. bad values are refused, naming the field ---------------------------------------------------
@pytest.mark.parametrize("change, error", [
    (dict(model_options={"width_mult": -1}), "width_mult=-1: must be a number > 0"),
    (dict(model_options={"depth_mult": -2}), "depth_mult=-2: must be a number > 0"),
    (dict(model_options={"num_classes": -3}), "num_classes=-3: must be an int >= 0"),
    (dict(img_size=-5), "img_size=-5: must be an int >= 1"),
    (dict(img_size=0), "img_size=0: must be an int >= 1"),
    (dict(model_options={"drop_path": 5.0}), r"drop_path=5.0: must be a number in \[0, 1\)"),
    (dict(model_options={"patch_size": 0}), "patch_size=0: must be an int >= 1"),
    (dict(model_options={"patch_size": 5}), "img_size 16 is not a multiple of patch_size 5"),
    (dict(lr="0.1"), "lr must be a finite number, got '0.1'"),
    (dict(lr=None), "lr must be a finite number, got None"),
    (dict(lr=1j), "lr must be a finite number, got 1j"),
    (dict(lr=float("inf")), "lr must be a finite number, got inf"),
])
def test_a_bad_value_is_refused_before_anything_runs(change, error):
    with pytest.raises(ValueError, match=error):
        run_config("smoke", "resmlp_S12", **change)


def test_bad_names_and_counts_say_what_is_allowed():
    with pytest.raises(ValueError, match="unknown timm model 'nope'; see timm.list_models"):
        create_model("timm:nope")
    for bad in (1.5, "abc", 0, [], [1, -1], True):
        with pytest.raises(ValueError, match=re.escape(f"seeds must be a positive count or a list of seeds >= 0, got {bad!r}")):
            seeds("smoke", bad)


@pytest.mark.parametrize("params, error", [
    ({"seeds": 1.5}, "seeds must be a positive count"),
    ({"seeds": "abc"}, "seeds must be a positive count"),
    ({"per_class": "many"}, "per_class='many' is str; expected int, like its default 8"),
])
def test_runner_parameters_are_checked_before_a_kernel_starts(params, error, monkeypatch):
    monkeypatch.setattr(runner.pm, "execute_notebook", _no_kernel)
    with pytest.raises(SystemExit, match=error):
        runner.main(["--paper", "appendix", "--item", "dataset", *[a for k, v in params.items()
                                                                   for a in ("-p", k, json.dumps(v))]])


def test_an_image_size_of_zero_is_refused_not_run_at_224(monkeypatch, tmp_path):
    import papermill as pm
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "results"))
    with pytest.raises(pm.PapermillExecutionError, match="img_size must be None or a positive multiple of 32, got 0"):
        runner.execute(REPO / "notebooks" / "resmlp" / "table1_efficiency.ipynb", {"profile": "smoke", "img_size": 0},
                       tmp_path / "book")
    assert not (tmp_path / "results").exists() and not list((tmp_path / "book").rglob("*.ipynb"))


def test_an_unwritable_record_folder_is_found_before_training(tiny, monkeypatch):
    (tiny / "file").write_text("not a folder")
    monkeypatch.setattr(trainer, "_fit", _no_kernel)
    with pytest.raises(PermissionError, match=f"cannot write run records to {tiny / 'file' / 'records'}"):
        train(TINY, data=tiny_data(), records=tiny / "file" / "records", cache=tiny / "cache")


# --- 7. chapters not started say so -------------------------------------------------------------
@pytest.mark.parametrize("paper", ["scaled-relu", "dual-patchnorm", "three-things-vit"])
def test_a_chapter_not_started_says_what_exists(paper, tmp_path, monkeypatch):
    (tmp_path / "resmlp").mkdir()          # a tree where only ResMLP has notebooks
    monkeypatch.setattr(runner, "NOTEBOOKS", tmp_path)
    with pytest.raises(SystemExit, match=f"the {paper} chapter has no notebooks yet .*resmlp"):
        runner.find(paper)
