"""scripts/check_reexecution.py: what counts as a changed number when a notebook runs again."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))

from check_reexecution import compare  # noqa: E402


def _csv(path, rows):
    path.write_text("row,quantity,value\n" + "".join(f"{r},q,{v}\n" for r, v in rows))
    return path


def test_another_cpus_last_digits_are_unchanged_numbers_and_a_real_change_is_not(tmp_path):
    old = _csv(tmp_path / "old.csv", [("a", "0.013031061030524796"), ("b", "99.38"), ("c", "text")])
    ulp = _csv(tmp_path / "ulp.csv", [("a", "0.013031061030524793"), ("b", "99.38"), ("c", "text")])
    assert compare(ulp, old) == "unchanged (1 cell(s) differ only in the last digits: floating-point rounding)"
    assert compare(old, old) == "unchanged"
    moved = _csv(tmp_path / "moved.csv", [("a", "0.013031061030524793"), ("b", "99.39"), ("c", "other")])
    assert compare(moved, old) == "2 cell(s) differ: row 1 'value': 99.38 -> 99.39; row 2 'value': text -> other"
    assert compare(old, tmp_path / "none.csv").startswith("new file")
    f32 = _csv(tmp_path / "f32.csv", [("a", "0.013031061030524796"), ("b", "99.38"), ("c", "text"), ("d", "5.277511119842529")])
    other_cpu = _csv(tmp_path / "o.csv", [("a", "0.013031061030524796"), ("b", "99.38"), ("c", "text"), ("d", "5.2775115966796875")])
    assert compare(other_cpu, f32).startswith("unchanged (1 cell")   # a float32 logit, its last bit rounded otherwise


def test_a_column_timed_on_this_machine_is_listed_not_compared(tmp_path):
    old = tmp_path / "old.csv"
    old.write_text("model,top1_mean,CPU min/run\nViT-S,81.2,0.51\n")
    slower = tmp_path / "slower.csv"
    slower.write_text("model,top1_mean,CPU min/run\nViT-S,81.2,0.99\n")
    assert compare(slower, old) == "unchanged (computed anew on this machine, not compared: CPU min/run)"
    slower.write_text("model,top1_mean,CPU min/run\nViT-S,81.3,0.99\n")
    assert compare(slower, old).startswith("1 cell(s) differ: row 0 'top1_mean': 81.2 -> 81.3")


def test_a_notebook_stopped_for_weights_says_where_they_were_trained(tmp_path, monkeypatch):
    import json
    import check_reexecution
    from vitmlp import records
    from vitmlp.records import config_hash, save_record
    from vitmlp.train import TrainConfig
    hashes = []
    for seed, machine in enumerate([{"cpu_isa": "AVX-512 BF16"}, {"gpu": "NVIDIA H200", "cpu_isa": "AMX"},
                                    {"gpu": "NVIDIA H200"}, {"cpu_isa": "AVX2"}]):
        cfg = TrainConfig(model="vit_S", seed=seed)
        hashes.append(config_hash(cfg))
        save_record({"hash": hashes[-1], "status": "ok", "profile": cfg.profile, "config": cfg.to_dict(), "machine": machine,
                     "num_classes": 10, "metrics": {"final_top1": 50.0}, "curves": {"val_top1": [50.0]}}, tmp_path)
    queue = tmp_path / "queue.json"
    queue.write_text(json.dumps({"runs": [], "weights": hashes + ["0" * 16]}))
    monkeypatch.setattr(check_reexecution, "this_hardware", lambda: "AVX-512 BF16")
    monkeypatch.setattr(records, "cpu_capability", lambda: {"isa": "AVX-512 BF16", "bf16": True})
    assert check_reexecution.lacking(queue, tmp_path) == (
        "lacks the weights of 5 run(s): 1 trained on this hardware kind (AVX-512 BF16), 1 on AVX2 (rebuilt under its ISA "
        "caps): rebuilds here have equalled their records; 2 on NVIDIA H200 (a rebuild here is close to, not equal to, "
        "its record); 1 with no record yet (not trained)")
    # an AVX2 machine cannot run a wider CPU's kernels: the AVX-512 BF16 record is only close there
    monkeypatch.setattr(check_reexecution, "this_hardware", lambda: "AVX2")
    monkeypatch.setattr(records, "cpu_capability", lambda: {"isa": "AVX2", "bf16": False})
    assert check_reexecution.lacking(queue, tmp_path).startswith(
        "lacks the weights of 5 run(s): 1 trained on this hardware kind (AVX2): rebuilds here have equalled their "
        "records; 1 on AVX-512 BF16, 2 on NVIDIA H200 (a rebuild here is close to, not equal to, its record); 1 with "
        "no record yet")
    queue.write_text(json.dumps({"runs": [], "weights": ["0" * 16]}))   # nothing here to rebuild: not said
    assert check_reexecution.lacking(queue, tmp_path) == "lacks the weights of 1 run(s): 1 with no record yet (not trained)"
    queue.write_text(json.dumps({"runs": [], "weights": []}))
    assert check_reexecution.lacking(queue, tmp_path) == ""
