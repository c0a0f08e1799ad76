"""The trainer: repeatable, resumable, crash-aware, cached, distributed; bad configs refused."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # ddp_worker, whatever pytest's import mode
from ddp_worker import tiny_data, tiny_model  # noqa: E402
from vitmlp.profiles import PROFILES, get_profile, run_config, seeds  # noqa: E402
from vitmlp import records  # noqa: E402
from vitmlp.records import ISA_CAPS, config_hash, load_record, loaded_as_recorded, rebuild_notes  # noqa: E402
from vitmlp.train import SAM, Batches, TrainConfig, epoch_batches, load_weights, train, trainer  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"
REAL_BUILD_MODEL = trainer.build_model
BASE = dict(model="tiny_mlp", dataset="tiny", img_size=8, batch_size=32, epochs=3, lr=3e-3, warmup_epochs=1)


@pytest.fixture(autouse=True)
def _tiny(monkeypatch, tmp_path):
    monkeypatch.setattr(trainer, "build_model", tiny_model)
    monkeypatch.setenv("VITMLP_CACHE", str(tmp_path / "default_cache"))   # never the real cache
    monkeypatch.setenv("VITMLP_RECORDS", str(tmp_path / "default_records"))
    monkeypatch.setenv("VITMLP_PROGRESS", "0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a second thread only adds contention on a shared machine
    yield
    torch.set_num_threads(threads)


def run(tmp, cfg, **kw):
    return train(cfg, data=tiny_data(), records=tmp / "records", cache=tmp / "cache", **kw)


def weights(tmp, rec):
    return torch.load(tmp / "cache" / rec["hash"] / "model.pt", weights_only=True)


def same_run(a, b):
    """Everything but timing and provenance is identical."""
    keys = ("hash", "config", "status", "crash", "metrics", "curves", "params", "trainable_params")
    return {k: a[k] for k in keys} == {k: b[k] for k in keys}


def assert_same_weights(wa, wb):
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def test_repeatable_in_fresh_folders(tmp_path):
    cfg = dict(BASE, model="tiny_vit", mixup=0.8, cutmix=1.0, random_erasing=0.5, label_smoothing=0.1)
    a, b = run(tmp_path / "a", cfg), run(tmp_path / "b", cfg)
    assert a["status"] == "ok" and a["metrics"]["steps"] == 3 * (256 // 32)
    assert same_run(a, b)
    assert_same_weights(weights(tmp_path / "a", a), weights(tmp_path / "b", b))
    # the record on disk is the returned one, and the checkpoint of an unfinished run is gone
    assert json.loads((tmp_path / "a" / "records" / f"{a['hash']}.json").read_text())["metrics"] == a["metrics"]
    assert not (tmp_path / "a" / "cache" / a["hash"] / "last.pt").exists()
    c = run(tmp_path / "c", dict(cfg, seed=1))
    assert c["curves"]["train_loss"] != a["curves"]["train_loss"]


class Killed(Exception):
    pass


def test_resume_after_kill_equals_uninterrupted(tmp_path):
    # crop+flip (per-step generator), Mixup/CutMix (numpy RNG), random erasing (python + torch RNG)
    cfg = dict(BASE, model="tiny_vit", augment="crop_flip", mixup=0.8, cutmix=1.0, random_erasing=0.5, repeated_aug=2)
    whole = run(tmp_path / "whole", cfg)

    def kill_after_epoch_1(event, info):
        if event == "epoch" and info["epoch"] == 1:
            raise Killed
    with pytest.raises(Killed):
        run(tmp_path / "cut", cfg, callback=kill_after_epoch_1)
    h = whole["hash"]
    assert (tmp_path / "cut" / "cache" / h / "last.pt").exists()
    assert load_record(h, tmp_path / "cut" / "records") is None
    steps = []
    resumed = run(tmp_path / "cut", cfg, callback=lambda e, i: steps.append(i["step"]) if e == "step" else None)
    assert steps[0] == 256 // 32 + 1  # it started at epoch 2, not from scratch
    assert same_run(whole, resumed)
    assert_same_weights(weights(tmp_path / "whole", whole), weights(tmp_path / "cut", resumed))


def test_ctrl_c_mid_epoch_checkpoints_and_resumes_exactly(tmp_path):
    cfg = dict(BASE, mixup=0.5, random_erasing=0.5)
    whole = run(tmp_path / "whole", cfg)

    def ctrl_c(event, info):
        if event == "step" and info["step"] == 11:
            os.kill(os.getpid(), signal.SIGINT)  # the handler lets the step under way finish, saves, raises
    with pytest.raises(KeyboardInterrupt, match="step 12"):
        run(tmp_path / "cut", cfg, callback=ctrl_c)
    ck = torch.load(tmp_path / "cut" / "cache" / whole["hash"] / "last.pt", weights_only=True)
    assert (ck["state"]["step"], ck["state"]["batch"]) == (12, 4)
    assert same_run(whole, run(tmp_path / "cut", cfg))


@pytest.mark.parametrize("lr, reason", [(1e6, "loss not finite"), (1e2, "loss > 10 x initial for 5 steps")])
def test_divergence_is_recorded_as_crash_with_the_step(tmp_path, lr, reason):
    rec = run(tmp_path, dict(BASE, lr=lr, warmup_epochs=0))
    assert rec["status"] == "crash" and rec["crash"]["reason"] == reason
    assert isinstance(rec["crash"]["step"], int) and rec["crash"]["step"] < rec["config"]["epochs"] * 8
    assert rec["metrics"]["steps"] == rec["crash"]["step"] + 1
    assert load_record(rec["hash"], tmp_path / "records")["status"] == "crash"
    assert not (tmp_path / "cache" / rec["hash"] / "model.pt").exists()
    ok = run(tmp_path, BASE)
    assert ok["status"] == "ok" and ok["crash"] is None


@pytest.mark.parametrize("lr", [1e-3, 1e2, 1e6])
def test_reading_the_loss_back_every_few_steps_books_the_same_run(tmp_path, monkeypatch, lr):
    """On a GPU the loss is read back every LOSS_SYNC steps, not each step: the same record (curves,
    steps, the crash and its step) as reading it at every step, here forced on the CPU."""
    cfg = dict(BASE, lr=lr, warmup_epochs=0)
    each = run(tmp_path / "each", cfg)
    monkeypatch.setitem(trainer.LOSS_SYNC, "cpu", 3)   # 8 steps per epoch: flushes mid-epoch and at its end
    batched = run(tmp_path / "batched", cfg)
    assert same_run(each, batched)
    assert (each["status"] == "crash") == (lr > 1)
    if each["status"] == "ok":
        assert_same_weights(weights(tmp_path / "each", each), weights(tmp_path / "batched", batched))


def test_recorded_run_is_not_trained_again(tmp_path, monkeypatch):
    first = run(tmp_path, BASE)
    crashed = run(tmp_path, dict(BASE, lr=1e6, warmup_epochs=0))
    calls = []
    monkeypatch.setattr(trainer, "_fit", lambda *a, **k: calls.append(1))
    assert run(tmp_path, BASE) == first
    assert run(tmp_path, dict(BASE, lr=1e6, warmup_epochs=0)) == crashed
    assert run(tmp_path, TrainConfig(**BASE)) == first  # a dict and a TrainConfig are the same run
    assert calls == []
    run(tmp_path, BASE, force=True)
    assert calls == [1]


@pytest.mark.parametrize("bad, message", [
    (dict(optimizer="adagrad"), "unknown optimizer 'adagrad'; valid choices: adamw, lamb, sgd"),
    (dict(epochs=-1), "epochs must be a positive int"),
    (dict(batch_size=0), "batch_size must be a positive int"),
    (dict(lr=0.0), "lr must be > 0"),
    (dict(lr=float("nan")), "lr must be a finite number, got nan"),
    (dict(sched="linear"), "unknown sched 'linear'"),
    (dict(precision="fp16"), "unknown precision 'fp16'"),
    (dict(distill="hard"), "needs teacher"),
    (dict(mixup=0.8, batch_size=31), "even batch_size"),
    (dict(label_smoothing=1.0), "label_smoothing"),
    (dict(epoch=3), "unknown TrainConfig field 'epoch'"),
    (dict(model_options={"img_size": 16}), "model_options img_size 16 differs from img_size 8"),
    (dict(augment="randaugment"), "unknown augment 'randaugment'; valid choices: none, crop_flip"),
    (dict(model_options={"f": object()}), "plain JSON"),
    (dict(trainable=[".nothing."]), "matches no parameter"),
    (dict(batch_size=512), "exceeds the 256 training examples"),
    (dict(train_size=10_000), "the dataset has 256"),
    (dict(model="tiny_cnn"), "unknown model 'tiny_cnn'"),
    (dict(init_from="0123456789abcdef"), "no record with status ok"),
    (dict(stop_epoch=3), "stop_epoch must be below epochs"),
    (dict(stop_epoch=1, steps=20), "given without steps"),
])
def test_bad_config_fails_at_once_and_writes_nothing(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        run(tmp_path, {**BASE, **bad})
    assert list(tmp_path.rglob("*")) == []


def test_sam_takes_the_gradient_at_the_ascended_point():
    # f(w) = 1/2 w^T A w, grad = A w: the SAM update is w - lr * A (w + rho * Aw / |Aw|)
    a = torch.tensor([[3.0, 1.0], [1.0, 2.0]])
    w0 = torch.tensor([1.0, -2.0])
    w = torch.nn.Parameter(w0.clone())
    opt = SAM(torch.optim.SGD([w], lr=0.1), rho=0.5)
    (0.5 * w @ a @ w).backward()
    opt.ascent()
    g = a @ w0
    assert torch.allclose(w.detach(), w0 + 0.5 * g / g.norm())
    opt.zero_grad()
    (0.5 * w @ a @ w).backward()
    opt.descent()
    expected = w0 - 0.1 * a @ (w0 + 0.5 * g / g.norm())
    assert torch.allclose(w.detach(), expected)
    assert not torch.allclose(expected, w0 - 0.1 * g)  # differs from a plain SGD step


def test_sam_and_clipping_train(tmp_path):
    rec = run(tmp_path, dict(BASE, sam_rho=0.05, clip_grad=1.0, optimizer="lamb"))
    assert rec["status"] == "ok" and math.isfinite(rec["metrics"]["final_train_loss"])


def test_bf16_autocast_trains_where_native(tmp_path, monkeypatch):
    monkeypatch.setattr(trainer, "native_bf16", lambda device: True)
    rec = run(tmp_path, dict(BASE, model="tiny_vit", precision="bf16"))
    assert rec["status"] == "ok" and math.isfinite(rec["metrics"]["final_train_loss"]) and rec["precision"] == "bf16"
    assert run(tmp_path, dict(BASE, model="tiny_vit", precision="auto"))["precision"] == "bf16"


def test_nothing_trains_in_bf16_without_native_support(tmp_path, monkeypatch):
    monkeypatch.setattr(trainer, "native_bf16", lambda device: False)
    seen = []
    real = torch.autocast
    monkeypatch.setattr(torch, "autocast", lambda *a, **kw: seen.append(kw.get("enabled")) or real(*a, **kw))
    rec = run(tmp_path, dict(BASE, model="tiny_vit", precision="auto"))
    assert rec["precision"] == "fp32" and seen and not any(seen)
    with pytest.raises(ValueError, match="without native bf16; use precision='auto'"):
        run(tmp_path, dict(BASE, model="tiny_vit", precision="bf16", seed=7))


def test_fixed_steps_and_eval_every(tmp_path):
    rec = run(tmp_path, dict(BASE, steps=13, eval_every=2))
    assert rec["metrics"]["steps"] == 13 and rec["metrics"]["epochs"] == 2  # 8 steps per epoch
    assert rec["curves"]["val_top1"][0] is None and rec["curves"]["val_top1"][1] is not None


def test_stop_epoch_trains_the_first_epochs_of_the_whole_schedule(tmp_path):
    full = run(tmp_path, dict(BASE, epochs=4, eval_every=1))
    probe = run(tmp_path, dict(BASE, epochs=4, stop_epoch=2))
    assert probe["hash"] != full["hash"] and probe["metrics"]["epochs"] == 2 and probe["metrics"]["steps"] == 16
    for k in ("train_loss", "lr", "val_top1"):   # the lr of a 4-epoch schedule, not of a 2-epoch one
        assert probe["curves"][k] == full["curves"][k][:2], k
    assert probe["metrics"]["final_top1"] == full["curves"]["val_top1"][1]
    short = run(tmp_path, dict(BASE, epochs=2))
    assert short["curves"]["lr"] != probe["curves"]["lr"]


def test_trainable_filter_freezes_everything_else(tmp_path):
    base = run(tmp_path, dict(BASE, model="tiny_vit"))
    tuned = run(tmp_path, dict(BASE, model="tiny_vit", init_from=base["hash"], trainable=[".attn.", "head"]))
    w0, w1 = weights(tmp_path, base), weights(tmp_path, tuned)
    for k in w0:
        assert torch.equal(w0[k], w1[k]) != (".attn." in k or k.startswith("head")), k
    n_attn = sum(v.numel() for k, v in w0.items() if ".attn." in k or k.startswith("head"))
    assert tuned["trainable_params"] == n_attn < tuned["params"]


def test_init_from_changes_resolution_and_classes(tmp_path):
    base = run(tmp_path, dict(BASE, model="tiny_vit"))
    big = train(dict(BASE, model="tiny_vit", img_size=16, init_from=base["hash"], model_options={"img_size": 16}),
                data=tiny_data(n_train=64, n_val=32, img_size=16), records=tmp_path / "records",
                cache=tmp_path / "cache")
    assert big["status"] == "ok" and big["init_skipped"] == []
    w = weights(tmp_path, big)
    assert w["pos_embed"].shape == (1, 1 + 16, 16)  # 2x2 grid of 4 px patches -> 4x4


def test_distillation_from_a_teacher_run(tmp_path):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)       # as a worker of experiment.run(parallel=2) trains it
        teacher = run(tmp_path, dict(BASE, model="tiny_vit"))
    finally:
        torch.set_num_threads(threads)
    assert teacher["machine"]["torch_threads"] == 1
    for kind in ("hard", "soft"):
        rec = run(tmp_path, dict(BASE, distill=kind, teacher=teacher["hash"], distill_tau=2.0))
        assert rec["status"] == "ok"
    # teacher weights are rebuilt by retraining when the cache was emptied, with the record's threads
    # (the bits of a run depend on the thread count)
    before = weights(tmp_path, teacher)
    (tmp_path / "cache" / teacher["hash"] / "model.pt").unlink()
    try:
        torch.set_num_threads(2)
        again = load_weights(teacher["hash"], records=tmp_path / "records", cache=tmp_path / "cache",
                             data=tiny_data())
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert_same_weights(before, again.state_dict())


def test_a_teacher_missing_from_the_cache_is_retrained_before_the_run_not_inside_it(tmp_path, monkeypatch):
    teacher = run(tmp_path, dict(BASE, model="tiny_vit", epochs=1))
    (tmp_path / "cache" / teacher["hash"] / "model.pt").unlink()
    depth, started = [0], []
    real = trainer._fit

    def fit(cfg, *a, **k):   # records how deep in other runs each run starts
        started.append((cfg.model, depth[0]))
        depth[0] += 1
        try:
            return real(cfg, *a, **k)
        finally:
            depth[0] -= 1
    monkeypatch.setattr(trainer, "_fit", fit)
    rec = run(tmp_path, dict(BASE, distill="hard", teacher=teacher["hash"], epochs=1))
    assert rec["status"] == "ok"
    assert started == [("tiny_vit", 0), ("tiny_mlp", 0)]   # the teacher first, then the student, never nested
    # the student's record says its teacher's weights were a rebuild, here as the record trained it
    note = rec["rebuilt_weights"][teacher["hash"]]
    assert note["rebuilt"] == note["record"] | {"final_top1": note["rebuilt"]["final_top1"]}
    assert note["rebuilt"]["final_top1"] == teacher["metrics"]["final_top1"]


def test_a_rebuilt_students_note_says_which_teacher_weights_it_loaded(tmp_path):
    """A student's record names the teacher weights it loaded; its rebuild may load others (the
    teacher's own, or a rebuild made on this machine): the rebuild's note says which, and so does a page."""
    import pandas as pd
    from vitmlp.experiment import training_time
    teacher = run(tmp_path, dict(BASE, model="tiny_vit", epochs=1))
    student = run(tmp_path, dict(BASE, distill="hard", teacher=teacher["hash"], epochs=1))
    records, cache = tmp_path / "records", tmp_path / "cache"
    (cache / student["hash"] / "model.pt").unlink()
    load_weights(student["hash"], records=records, cache=cache, data=tiny_data())
    first = trainer.rebuilt_weights(student["hash"], cache)
    assert first["loaded"] == {teacher["hash"]: None}  # the teacher's own, as its record: like for like
    assert loaded_as_recorded(first, student) is True
    assert loaded_as_recorded({k: v for k, v in first.items() if k != "loaded"}, student) is None  # an older note
    for h in (teacher["hash"], student["hash"]):
        (cache / h / "model.pt").unlink()
    load_weights(teacher["hash"], records=records, cache=cache, data=tiny_data())
    load_weights(student["hash"], records=records, cache=cache, data=tiny_data())
    rebuilt_teacher = trainer.rebuilt_weights(teacher["hash"], cache)
    assert "loaded" not in rebuilt_teacher   # it loads nothing
    second = trainer.rebuilt_weights(student["hash"], cache)
    assert second["loaded"] == {teacher["hash"]: rebuilt_teacher}
    assert loaded_as_recorded(second, student) is False   # its record loaded the teacher's own weights
    assert loaded_as_recorded(rebuilt_teacher, teacher) is True   # a run that loads nothing
    page = pd.DataFrame({"hash": [student["hash"]], "reads_weights": True, "cores": 2, "threads": 1,
                         "wall_time_s": 60.0, "gpu": None})
    assert (f"this page reads it and the rebuild loaded {teacher['hash'][:8]}'s weights as rebuilt on "
            f"{rebuilt_teacher['rebuilt']['hardware']} in fp32") in training_time(page, cache=cache)


def test_weights_rebuilt_on_other_hardware_are_flagged_and_replaced_by_the_runs_own(tmp_path):
    teacher = run(tmp_path, dict(BASE, model="tiny_vit", epochs=1))
    path = tmp_path / "records" / f"{teacher['hash']}.json"
    elsewhere = {**teacher, "precision": "bf16", "machine": {**teacher["machine"], "gpu": None, "cpu_isa": "AMX"}}
    path.write_text(json.dumps(elsewhere))   # as if trained on another machine, whose cache is not here
    (tmp_path / "cache" / teacher["hash"] / "model.pt").unlink()
    with pytest.warns(UserWarning, match=r"weights rebuilt on .*fp32, 1 thread.*its record trained on AMX, bf16, 1 thr"):
        load_weights(teacher["hash"], records=tmp_path / "records", cache=tmp_path / "cache", data=tiny_data())
    note = trainer.rebuilt_weights(teacher["hash"], tmp_path / "cache")
    assert note["record"]["hardware"] == "AMX" and note["rebuilt"]["precision"] == "fp32"
    # and kept with the records: the pair is evidence after this machine's cache is gone
    assert rebuild_notes(tmp_path / "records") == [{"hash": teacher["hash"], **note}]
    # the run trained for itself again (its record gone): its own weights, no rebuild note
    path.unlink()
    run(tmp_path, dict(BASE, model="tiny_vit", epochs=1))
    assert trainer.rebuilt_weights(teacher["hash"], tmp_path / "cache") is None


_TRAIN_IN_CHILD = """
import json, sys, torch
torch.set_num_threads(1)
from vitmlp.train import train
print(train(json.loads(sys.argv[1]), records=sys.argv[2], cache=sys.argv[3])["hash"])
"""


def test_a_cpu_record_is_rebuilt_with_the_kernels_of_its_cpu(tmp_path, monkeypatch):
    """A run trained with AVX2's kernels (a real AVX2 CPU, or a wider one capped) is rebuilt bit for bit
    on a wider CPU: the rebuild runs in a process under the record's ISA caps, in its precision."""
    monkeypatch.setattr(trainer, "build_model", REAL_BUILD_MODEL)   # the processes build from the registry
    cfg = dict(model="resmlp_S12", dataset="digits", img_size=8, batch_size=32, epochs=1, train_size=96,
               val_size=64, lr=3e-3, warmup_epochs=0, precision="auto",
               model_options={"img_size": 8, "patch_size": 4, "width_mult": 1 / 24, "depth_mult": 1 / 6})
    env = {**os.environ, **ISA_CAPS["AVX2"],
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", _TRAIN_IN_CHILD, json.dumps(cfg), str(tmp_path / "records"),
                        str(tmp_path / "cache")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    h = r.stdout.split()[-1]
    rec = load_record(h, tmp_path / "records")
    assert (rec["machine"]["cpu_isa"], rec["precision"]) == ("AVX2", "fp32")   # the caps are what it records
    assert rec["machine"].get("cpu_isa_native", "AVX2") == records.cpu_capability()["native"]   # and its own, if wider
    path = tmp_path / "cache" / h / "model.pt"
    before = torch.load(path, weights_only=True)
    path.unlink()
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    again = load_weights(h, records=tmp_path / "records", cache=tmp_path / "cache")   # this process: no caps
    assert_same_weights(before, again.state_dict())
    note = trainer.rebuilt_weights(h, tmp_path / "cache")
    assert note["rebuilt"] == note["record"]   # same kernels, precision, threads and top-1


def test_isa_caps_only_narrow_a_wider_cpu(monkeypatch):
    monkeypatch.setattr(records, "cpu_capability", lambda: {"isa": "AVX-512 BF16", "bf16": True})
    assert records.isa_caps("AVX-512 BF16") == {}
    assert records.isa_caps("AVX2") == ISA_CAPS["AVX2"]
    assert records.isa_caps("AMX") is None and records.isa_caps(None) is None   # wider or unknown: cannot
    monkeypatch.setattr(records, "cpu_capability", lambda: {"isa": "AVX2", "bf16": False})
    assert records.isa_caps("AVX-512 BF16") is None and records.isa_caps("AVX2") == {}


def test_ddp_two_processes_match_one(tmp_path):
    cfg = dict(BASE, epochs=2)
    one = run(tmp_path / "one", cfg)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        str(Path(__file__).with_name("ddp_worker.py")), str(tmp_path / "two" / "records"),
                        str(tmp_path / "two" / "cache"), json.dumps(cfg), str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert sorted(d["rank"] for d in lines) == [0, 1] and {d["world_size"] for d in lines} == {2}
    two = load_record(one["hash"], tmp_path / "two" / "records")  # only rank 0 wrote, under the same hash
    assert two["world_size"] == 2 and one["world_size"] == 1
    assert two["metrics"]["final_top1"] == one["metrics"]["final_top1"]
    for k in ("final_train_loss", "final_val_loss"):
        assert two["metrics"][k] == pytest.approx(one["metrics"][k], rel=1e-4)
    w1, w2 = weights(tmp_path / "one", one), weights(tmp_path / "two", two)
    for k in w1:
        assert torch.allclose(w1[k], w2[k], atol=1e-5), k
    assert sorted(p.name for p in (tmp_path / "two" / "records").iterdir()) == [f"{one['hash']}.json"]


def test_config_hash_ignores_where_and_how_a_run_executes_only():
    a = TrainConfig(**BASE)
    assert config_hash(a) == config_hash(a.replace(device="cpu")) == config_hash(a.replace(compile=True)) \
        != config_hash(a.replace(seed=1))
    assert config_hash(TrainConfig(**dict(BASE, lr=1))) == config_hash(TrainConfig(**dict(BASE, lr=1.0)))


def test_data_order_depends_on_seed_and_epoch_only():
    a = epoch_batches(100, 16, seed=0, epoch=0)
    assert a.shape == (6, 16) and len(set(a.flatten().tolist())) == 96  # last partial batch dropped
    assert torch.equal(a, epoch_batches(100, 16, seed=0, epoch=0))
    assert not torch.equal(a, epoch_batches(100, 16, seed=0, epoch=1))
    assert not torch.equal(a, epoch_batches(100, 16, seed=1, epoch=0))
    ra = epoch_batches(100, 16, seed=0, epoch=0, repeats=4)  # each image 4 times, in one batch
    for batch in ra:
        ids, counts = batch.unique(return_counts=True)
        assert (counts == 4).all()


def test_train_subsets_are_nested_and_seed_free():
    train_set, _ = tiny_data()
    small, big = Batches(train_set, 50), Batches(train_set, 100)
    assert len(small) == 50 and set(small.index.tolist()) < set(big.index.tolist())
    assert Batches(train_set).num_classes == 4


def test_the_gpu_profile_is_the_cpu_recipe_on_a_harder_task_with_more_data_width_and_seeds():
    cpu, gpu = run_config("cpu", "vit_S"), run_config("gpu", "vit_S")
    same = ("lr", "batch_size", "epochs", "img_size", "warmup_epochs", "weight_decay", "label_smoothing", "precision",
            "dataset")
    assert {k: getattr(gpu, k) for k in same} == {k: getattr(cpu, k) for k in same}
    assert gpu.model_options == dict(cpu.model_options, width_mult=2 * cpu.model_options["width_mult"])
    assert gpu.dataset_options == {"difficulty": 0.8, "n": 32_000} and gpu.val_size == 10_000
    assert seeds("gpu") == [0, 1, 2, 3, 4] and get_profile("gpu").provisional
    assert run_config("colab", "vit_S").dataset == "cifar100"   # real data stays a profile for Colab


def test_profiles_are_chosen_by_name():
    assert list(PROFILES) == ["smoke", "cpu", "gpu", "colab", "paper"]
    with pytest.raises(ValueError, match="unknown profile 'laptop'; valid choices: smoke, cpu, gpu, colab, paper"):
        get_profile("laptop")
    with pytest.raises(ValueError, match="unknown profile"):
        run_config("laptop", "vit_S")
    assert seeds("cpu") == list(range(get_profile("cpu").n_seeds))
    cpu = run_config("cpu", "vit_S", seed=2, lr=5e-4)
    p = get_profile("cpu")
    assert (cpu.profile, cpu.dataset, cpu.img_size, cpu.epochs, cpu.seed, cpu.lr) == \
        ("cpu", p.dataset, p.img_size, p.epochs, 2, 5e-4)
    assert cpu.model_options == {"img_size": 32, "patch_size": 4, "width_mult": 0.125, "depth_mult": 0.5}
    assert cpu.mixup == 0 and cpu.train_size == p.train_size
    # an experiment's model options win; None removes a profile key
    opts = run_config("cpu", "timm:resnet18", model_options={"patch_size": None, "width_mult": None,
                                                            "depth_mult": None}).model_options
    assert opts == {"img_size": 32}
    assert run_config("cpu", "vit_S", img_size=48).model_options["img_size"] == 48
    # the profile's dataset options go with its dataset only
    assert run_config("smoke", "vit_S").dataset_options == {"n": 384}
    assert run_config("smoke", "vit_S", dataset="digits").dataset_options == {}
    assert run_config("smoke", "vit_S", dataset_options={"seed": 1}).dataset_options == {"n": 384, "seed": 1}
    paper = run_config("paper", "vit_S16")
    assert paper.model_options == {"img_size": 224} and paper.epochs == 300 and paper.mixup == 0.8
    assert config_hash(run_config("cpu", "vit_S")) != config_hash(run_config("smoke", "vit_S"))
    # cpu trains every model in bf16 where it is native ("auto"); an experiment's override still wins,
    # and the other profiles keep fp32
    assert {run_config("cpu", m).precision for m in ("resmlp_S12", "mixer_S16", "vit_S", "timm:resnet18")} == {"auto"}
    assert run_config("cpu", "resmlp_S12", precision="fp32").precision == "fp32"
    assert {run_config(p, "mixer_S16").precision for p in ("smoke", "colab", "paper")} == {"fp32"}
    with pytest.raises(ValueError, match="unknown TrainConfig field 'learning_rate'"):
        run_config("cpu", "vit_S", learning_rate=1e-3)
    with pytest.raises(ValueError, match="unknown optimizer"):
        run_config("cpu", "vit_S", optimizer="adadelta")


def test_smoke_profile_trains_in_seconds(tmp_path):
    cfg = run_config("smoke", "tiny_vit")
    rec = train(cfg, data=tiny_data(n_train=256, n_val=128, img_size=cfg.img_size), records=tmp_path, cache=tmp_path)
    assert rec["status"] == "ok" and rec["profile"] == "smoke" and rec["wall_time_s"] < 30


def test_smoke_profile_with_the_real_models_and_embedded_data(tmp_path, monkeypatch):
    pytest.importorskip("vitmlp.models.vit")
    pytest.importorskip("vitmlp.data.loaders")
    monkeypatch.setattr(trainer, "build_model", REAL_BUILD_MODEL)
    for model, extra in [("vit_S", {}), ("resmlp_S12", {}), ("mixer_S16", {"pixel_shuffle": "patch"})]:
        cfg = run_config("smoke", model, **extra)
        rec = train(cfg, records=tmp_path / "records", cache=tmp_path / "cache")  # builds the embedded data
        assert rec["status"] == "ok" and rec["num_classes"] == 10, model
        assert rec["metrics"]["steps"] == cfg.train_size // cfg.batch_size
        assert load_weights(rec["hash"], records=tmp_path / "records", cache=tmp_path / "cache").training is False


@pytest.mark.parametrize("native", [False, True])
def test_an_fp32_run_trains_without_tf32_and_leaves_the_flags_as_they_were(tmp_path, monkeypatch, native):
    """On a GPU, cuDNN would run fp32 convolutions in TF32: an fp32 run (the appendix's precision check)
    turns TF32 off while it trains; a bf16 run leaves the flags alone; both restore them."""
    monkeypatch.setattr(trainer, "native_bf16", lambda device: native)
    seen = []
    flags = lambda: (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)  # noqa: E731
    before = flags()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        rec = run(tmp_path, dict(BASE, epochs=1, precision="auto"), callback=lambda e, i: seen.append(flags()))
        assert rec["precision"] == ("bf16" if native else "fp32")
        assert set(seen) == {(True, True) if native else (False, False)}
        assert flags() == (True, True)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def test_a_run_says_its_epochs_beside_its_checkpoint_for_the_pools_bar(tmp_path):
    from vitmlp.experiment import under_way
    cfg = dict(BASE, epochs=3)
    h = config_hash(TrainConfig.from_dict(cfg))
    seen = []

    def read(event, info):
        if event == "step" and info["step"] == 1:      # started: 0 epochs done
            seen.append(under_way([h], tmp_path / "cache"))
        if event == "epoch" and info["epoch"] < 3:
            seen.append(json.loads((tmp_path / "cache" / h / trainer.PROGRESS).read_text())["epoch"])
            seen.append(under_way([h, "0123456789abcdef"], tmp_path / "cache"))
    run(tmp_path, cfg, callback=read)
    assert seen == [f"{h[:8]} 0/3 ep", 1, f"{h[:8]} 1/3 ep; 1 waiting", 2, f"{h[:8]} 2/3 ep; 1 waiting"]
    assert not (tmp_path / "cache" / h / trainer.PROGRESS).exists()   # a finished run has none
    # a stopped run's file, older than the pool that now holds the run: it waits
    (tmp_path / "cache" / h / trainer.PROGRESS).write_text('{"epoch": 2, "epochs": 3}')
    assert under_way([h], tmp_path / "cache", since=time.time() + 1) == "1 waiting"


# A step's pattern: 40 MiB of 256 KiB blocks (activation-sized) written, then all freed at once.
# Printed: the page faults of 10 such steps and the MiB that glibc holds free afterwards (mallinfo2).
# Above glibc's initial mmap threshold (128 KiB) each block is mapped and unmapped, the same in every
# process; 64 KiB blocks on the heap made the control depend on the heap's layout (ASLR, hash seed: 1 or
# 41 MiB kept, in about a third of runs the latter, which failed CI).
_STEPS = """
import ctypes, resource, sys, torch
from vitmlp.train.trainer import keep_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
info = ctypes.CDLL("libc.so.6").mallinfo2
info.restype = Info
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def step():
    blocks = [torch.ones(64, 1024) for _ in range(160)]  # 160 x 256 KiB
    del blocks
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, info().fordblks >> 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator settings")
def test_training_keeps_freed_memory_for_the_next_step_instead_of_faulting_it_in_again():
    def steps(mode):
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
        if mode == "default":   # glibc's default values, held fixed: its adaptive threshold depends on what the
            # process freed before (the control once saw 112 faults in a full run of the suite)
            env.update(MALLOC_TRIM_THRESHOLD_="131072", MALLOC_MMAP_THRESHOLD_="131072")
        out = subprocess.run([sys.executable, "-c", _STEPS, mode], capture_output=True, text=True, check=True, env=env)
        kept, faults, free_mib = out.stdout.split()
        return kept, int(faults), int(free_mib)
    # Faults are counted in pages of the kernel's choosing: 4 KiB, or 2 MiB where transparent huge pages are
    # always on (CI: 224 faults for the control's 400 MiB), so they are compared with each other, not with a size.
    _, faults, free_mib = steps("default")
    assert free_mib < 20   # glibc hands the freed 40 MiB back at each step ...
    kept, kept_faults, kept_free_mib = steps("keep")
    assert kept == "True" and kept_free_mib >= 40   # ... kept, it holds them for the next step
    assert kept_faults < faults / 10   # which then faults nothing in again (here 64 vs ~104k at 4 KiB)
