"""experiment.run with several runs at once: the same records as one after another, and a
distillation student waits for its teacher whatever the order of the list."""
import torch

from vitmlp.experiment import Arm, plan, run
from vitmlp.records import config_hash


def test_parallel_runs_equal_sequential_and_wait_for_their_teacher(tmp_path, monkeypatch):
    monkeypatch.setenv("VITMLP_PROGRESS", "0")
    (_, teacher), = plan("smoke", [Arm("teacher", "vit_S")], seeds=1)
    students = plan("smoke", [Arm("student", "resmlp_S12", overrides={"distill": "hard",
                                                                     "teacher": config_hash(teacher)}),
                              Arm("mixer", "mixer_S16")], seeds=2)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)      # two workers of one thread each
        par = run(students + [("teacher", teacher)] + students[:1], parallel=2,
                  records=tmp_path / "par", cache=tmp_path / "cache_par")
        torch.set_num_threads(1)      # the same arithmetic, one run after another
        seq = run([("teacher", teacher)] + students, parallel=1,
                  records=tmp_path / "seq", cache=tmp_path / "cache_seq")
    finally:
        torch.set_num_threads(threads)
    assert list(par.label) == ["student", "student", "mixer", "mixer", "teacher", "student"]  # the order given
    assert (par.status == "ok").all()
    par = par.iloc[:5].set_index("hash")
    seq = seq.set_index("hash").loc[par.index]
    assert par.final_top1.tolist() == seq.final_top1.tolist()
    assert par.train_loss.tolist() == seq.train_loss.tolist()
    assert len(list((tmp_path / "par").glob("*.json"))) == 5      # a repeated config is trained once

    assert (par.threads == 1).all() and (seq.threads == 1).all()   # recorded, for training_time
