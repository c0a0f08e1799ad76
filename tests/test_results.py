"""Item records, the ledger, the book pages and the experiment helpers."""
import math
import os
import time
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import shutil

import pandas as pd
import pytest

from vitmlp import book
from vitmlp.experiment import Arm, plan, summary, training_time, wall_time
from vitmlp.profiles import paper_steps, resnet_recipe
from vitmlp.results import REPO, build_ledger, catalog, load_items, save_item, slug


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("VITMLP_BOOK", str(tmp_path / "book"))
    (tmp_path / "book").mkdir()
    shutil.copy(REPO / "book" / "_config.yml", tmp_path / "book")   # a book has its configuration
    return tmp_path / "results"


def test_slug():
    assert [slug(i) for i in ("Table 3", "Figure B.1", "Appendix A.1", "text")] == \
        ["table3", "figureB1", "appendixA1", "text"]


def test_catalog_has_one_row_per_class():
    cat = catalog()
    assert len(cat) == 86 and set(cat["class"]) <= {"exact", "measured", "reduced", "analysis",
                                                    "external", "schematic"}
    t1 = cat[(cat.paper == "three-things-vit") & (cat["item"] == "Table 1")]
    assert list(t1["class"]) == ["exact", "measured", "reduced"]
    assert not cat.duplicated(["paper", "item", "class"]).any()


def test_ledger_follows_files(results):
    led = build_ledger()
    assert (led.status == "missing").all() and (results / "ledger.csv").exists()
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    save_item("resmlp", "Figure 3", "analysis", profile="cpu", source="notebooks/resmlp/figure3.ipynb",
              figure=fig, table=pd.DataFrame({"a": [1]}), verdict="reproduced", summary="sparser")
    led = build_ledger()
    row = led[(led.paper == "resmlp") & (led["item"] == "Figure 3")].iloc[0]
    assert (row.status, row.verdict, row.profile) == ("regenerated", "reproduced", "cpu")
    assert (led.status == "regenerated").sum() == 1
    assert {p.name for p in (results / "resmlp").iterdir()} == \
        {"figure3.analysis.png", "figure3.analysis.csv", "figure3.analysis.json"}
    items = load_items("resmlp")
    assert items.iloc[0]["git"]["commit"] is None or len(items.iloc[0]["git"]["commit"]) == 40


def test_a_joined_table_keeps_its_counts_whole(results):
    rows = pd.concat([pd.DataFrame({"row": ["S12"], "ours": [70.0], "seeds": [3], "seeds read from weights": [2]}),
                      pd.DataFrame({"row": ["claim"], "ours": [1.5]})])   # a claim row has no seeds
    assert rows.seeds.dtype.kind == "f"
    save_item("resmlp", "Table 1", "reduced", profile="cpu", source="x", table=rows, verdict="reproduced")
    assert (results / "resmlp" / "table1.reduced.csv").read_text().splitlines() == \
        ["row,ours,seeds,seeds read from weights", "S12,70.0,3,2", "claim,1.5,,"]


@pytest.mark.parametrize("kw, msg", [
    (dict(paper="resnet", item="Table 1", cls="exact"), "valid choices: three-things-vit"),
    (dict(paper="resmlp", item="Table 99", cls="exact"), "not in the catalog"),
    (dict(paper="resmlp", item="Figure 3", cls="reduced"), "not in the catalog"),
    (dict(paper="resmlp", item="Figure 3", cls="analysis"), "needs a verdict"),
    (dict(paper="resmlp", item="Figure 3", cls="analysis", verdict="yes"), "unknown verdict"),
])
def test_save_item_refuses_bad_items_and_writes_nothing(results, kw, msg):
    paper, item, cls = kw.pop("paper"), kw.pop("item"), kw.pop("cls")
    with pytest.raises(ValueError, match=msg):
        save_item(paper, item, cls, profile="cpu", source="x", **kw)
    assert not results.exists() or not any(results.rglob("*"))


def test_book_pages(results):
    save_item("resmlp", "Table 1", "exact", profile="full size", source="src/vitmlp/exact.py")
    book.main()
    page = book.chapter_text("resmlp")
    n = (catalog().paper == "resmlp").sum()
    assert page.startswith("# ResMLP") and f"1 of {n} regenerated" in page
    toc = (book.book_root() / "_toc.yml").read_text()
    assert all(f"{p}/index" in toc for p in book.PAPERS) and "ledger" in toc


def test_plan_refuses_bad_parameters(results):
    with pytest.raises(ValueError, match="valid choices: smoke"):
        plan("laptop", [Arm("a", "vit_S")])
    with pytest.raises(ValueError, match="unknown model"):
        plan("smoke", [Arm("a", "vitt_S")])
    with pytest.raises(ValueError, match="valid choices"):
        plan("smoke", [Arm("a", "resmlp_S12", {"cross_patch": "fft"})])
    with pytest.raises(ValueError, match="seeds"):
        plan("smoke", [Arm("a", "vit_S")], seeds=-1)
    with pytest.raises(ValueError, match="dataset"):
        plan("smoke", [Arm("a", "vit_S", overrides={"dataset": "mnist"})])
    with pytest.raises(ValueError, match="epochs"):
        plan("smoke", [Arm("a", "vit_S", overrides={"epochs": -2})])
    runs = plan("smoke", [Arm("a", "vit_S"), Arm("b", "mixer_S16")], seeds=2)
    assert [(l, c.seed) for l, c in runs] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert not results.exists()


def test_paper_epochs_become_fractions_of_the_profiles_updates():
    from vitmlp.profiles import train_images
    assert train_images("smoke") == 256                       # smoke: 256 images, batch 32, 1 epoch = 8 updates
    assert paper_steps("smoke", 400) == 8 and paper_steps("smoke", 90) == 2 and paper_steps("smoke", 1) == 1
    r = resnet_recipe("smoke", epochs=90)
    assert (r["optimizer"], r["lr"], r["weight_decay"], r["sched"], r["steps"]) == ("momentum", 0.1 * 32 / 256, 1e-4,
                                                                                 "step", 2)
    assert r["decay_epochs"] == 2 / 3 / 8                     # the lr drops every third of the run
    plan("smoke", [Arm("old-fashioned", "resmlp_S12", {}, r)])  # a valid TrainConfig


def test_summary_counts_crashes_apart():
    df = pd.DataFrame({"label": ["a", "a", "b", "b"], "status": ["ok", "ok", "ok", "crash"],
                       "final_top1": [1.0, 3.0, 5.0, float("nan")]})
    s = summary(df)
    assert list(s.index) == ["a", "b"] and s.loc["a", "mean"] == 2.0 and s.loc["b", "crashes"] == 1


def test_training_time_counts_each_run_by_its_share_of_the_cores():
    df = pd.DataFrame({"hash": ["a", "b", "a"], "wall_time_s": [600.0, 1200.0, 600.0],
                       "threads": [2, 1, 2], "cores": [2, 2, 2]})
    # a: 10 min on both cores; b: 20 min on one core, beside another such run; the repeated a counts once
    assert training_time(df).startswith("Training time 20 min on 2 cores (2 runs")
    assert training_time(df.iloc[:1], df.iloc[1:]) == training_time(df)
    # rows of runs without a record (queued in a collect, missing) are counted, not timed
    queued = pd.DataFrame({"hash": ["c"], "wall_time_s": [None], "threads": [None], "cores": [None]})
    assert training_time(df, queued) == training_time(df)[:-1] + "; 1 run without a record)"
    # runs trained on a GPU by the queue runner: their wall time, on the GPU they name, apart from the CPU's
    gpu = pd.DataFrame({"hash": ["d", "e"], "wall_time_s": [240.0, 360.0], "threads": [1, 1], "cores": [16, 16],
                        "gpu": ["NVIDIA H200", "NVIDIA H200"]})
    assert training_time(gpu) == ("Training time 10 min of wall time on NVIDIA H200 (2 runs, several at once, "
                                  "from their records; cached runs are not retrained)")
    assert training_time(df.assign(gpu=None), gpu).startswith(
        "Training time 20 min on 2 cores (2 runs), 10 min of wall time on NVIDIA H200 (2 runs, several at once, from")


def test_wall_time_states_seconds_then_minutes(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    now = time.time()
    assert wall_time(now - 42).startswith("Notebook wall time 42 s on 2 cores")
    assert wall_time(now - 600) == "Notebook wall time 10.0 min on 2 cores"
