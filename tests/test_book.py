"""The book's generated pages: tables that cannot garble, notebook pages in the book's form, the
claims ledger, the paper's order, one repository URL."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from vitmlp import book

REPO = Path(__file__).resolve().parents[1]


def test_a_pipe_in_a_cell_stays_in_its_cell():
    df = pd.DataFrame({"row": ["Linear: ViT-B12|BN|-", "ResMLP-S12|linear->none"], "top1": [90.775000001, None],
                       "text": ["12.3456789", ""]})
    lines = book.table_md(df).splitlines()
    assert len(lines) == 4
    for line in lines:   # 3 columns: 4 unescaped pipes per line
        assert line.replace("\\|", "").count("|") == 4, line
    assert lines[2] == "| Linear: ViT-B12\\|BN\\|- | 90.78 | 12.35 |"
    assert lines[3].endswith("| — | — |")
    assert book.table_md(df.iloc[:0]) == "_(none yet)_"


@pytest.fixture
def copy(tmp_path, monkeypatch):
    shutil.copytree(REPO / "results", tmp_path / "results")
    shutil.copytree(REPO / "book", tmp_path / "book", ignore=shutil.ignore_patterns("_build"))
    monkeypatch.setenv("VITMLP_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("VITMLP_BOOK", str(tmp_path / "book"))
    return tmp_path


def test_notebook_pages_open_with_the_verdict_and_use_the_configured_repository(copy):
    cfg = (copy / "book" / "_config.yml").read_text()
    (copy / "book" / "_config.yml").write_text(cfg.replace("https://github.com/vitmlp/vitmlp-book",
                                                           "https://github.com/someone/fork"))
    book.main()
    page = copy / "book" / "resmlp" / "table3_ablations.ipynb"
    nb = nbformat.read(page, as_version=4)
    blocks = [c for c in nb.cells if book.VERDICT_TAG in c.metadata.get("tags", [])]
    assert len(blocks) == 1 and nb.cells.index(blocks[0]) == 2   # install cell, title, then the verdict
    assert "**Claim.**" in blocks[0].source and "**Verdict: " in blocks[0].source and "Rows: " in blocks[0].source
    [install] = [c for c in nb.cells if book.is_install_cell(c)]
    assert "git+https://github.com/someone/fork@" in install.source
    code = [c for c in nb.cells if c.cell_type == "code" and not book.is_install_cell(c)]
    assert all("hide-input" in c.metadata["tags"] for c in code)
    assert not [o for c in code for o in c.outputs if o.get("name") == "stderr"]
    chapter = copy / "book" / "resmlp" / "index.ipynb"
    [rerun] = [c for c in nbformat.read(chapter, as_version=4).cells if c.get("id") == "rerun"]
    assert '"https://github.com/someone/fork"' in rerun.source and '"--paper", "resmlp"' in rerun.source
    before = page.read_bytes(), chapter.read_bytes()
    book.main()                                      # publishing twice changes nothing
    assert (page.read_bytes(), chapter.read_bytes()) == before
    index = book.chapter_text("resmlp")
    assert "colab.research.google.com/github/someone/fork/blob/main/book/resmlp/table3_ablations.ipynb" in index


def test_the_ledger_lists_claims_with_links_and_counts(copy):
    book.main()
    page = (copy / "book" / "ledger.md").read_text()
    items = pd.concat([pd.read_json(p, typ="series").to_frame().T for p in (copy / "results").glob("*/*.*.json")])
    claims = items[items.verdict != ""]
    assert f"## Claims ({len(claims)})" in page
    assert page.count("<tr><td>") == len(claims)
    assert 'href="resmlp/table3_ablations.html"' in page and 'href="resmlp/index.html"' in page
    assert "| paper | reproduced | not reproduced |" in page     # counts per verdict, per paper
    counted = pd.Series([book.counted_verdict(c) for _, c in claims.iterrows()], index=claims.index)
    for paper, g in counted.groupby(claims.paper):   # counted: a provisional firm verdict as inconclusive
        assert f"| {paper} | {(g == 'reproduced').sum()} | {(g == 'not reproduced').sum()} |" in page
    intro = (copy / "book" / "intro.md").read_text()
    led = pd.read_csv(copy / "results" / "ledger.csv", dtype=str, keep_default_na=False)
    for paper, g in led.groupby("paper"):   # each chapter's line counts its items from the ledger
        line = next(x for x in intro.splitlines() if f"]({paper}/index.ipynb) |" in x)
        done = (g.status == "regenerated").sum()
        assert f"{done} of {len(g)} items" in line and line.endswith(" |")
        assert ("complete" in line) == (done == len(g))


def test_pages_follow_the_paper_order(copy):
    stems = [nb.stem for nb in book._notebooks("resmlp")]
    assert stems.index("figure1_architecture") < stems.index("table1_efficiency") < stems.index("table3_ablations") \
        < stems.index("appendixA_exploration") < stems.index("tableD1+tableD2_training")


def _unsigned_firm_item(results: Path, paper="resmlp", stem="appendixA.reduced"):
    """Make one committed item of the copy look as saved before items were signed (at the 3-epoch
    profile) with a firm verdict, whatever the committed results hold now."""
    import json
    f = results / paper / f"{stem}.json"
    item = json.loads(f.read_text())
    item["profile_signature"] = None
    item["verdict"] = item["verdict"] if item["verdict"] in ("reproduced", "not reproduced") else "not reproduced"
    f.write_text(json.dumps(item, indent=1))


def test_a_verdict_trained_short_of_the_plateau_is_marked_provisional(copy):
    """Reduced / analysis items: unsigned (saved before items named their profile's signature) or made
    at an earlier definition of their profile, or at a profile that stops short of the plateau, are
    provisional on the chapter page, the notebook page, the chapter status and the ledger."""
    from dataclasses import replace
    from vitmlp.profiles import PROFILES, SHORT_SCHEDULE, signature
    item = {"class": "reduced", "profile": "cpu", "verdict": "reproduced"}
    assert book.provisional({**item, "profile_signature": None}) == SHORT_SCHEDULE
    assert "earlier definition" in book.provisional({**item, "profile_signature": "0123456789ab"})
    assert book.provisional({**item, "profile_signature": signature("cpu")}) == PROFILES["cpu"].provisional
    assert book.provisional({**item, "class": "exact", "profile_signature": None}) == ""
    # once the profile is calibrated (no reason given), an item signed with its definition is plain
    calibrated = replace(PROFILES["cpu"], provisional="")
    PROFILES["cpu"], old = calibrated, PROFILES["cpu"]
    try:
        assert book.provisional({**item, "profile_signature": signature("cpu")}) == ""
    finally:
        PROFILES["cpu"] = old
    # a ResMLP item saved at the 3-epoch profile (before signatures) is marked wherever it shows, and only it
    _unsigned_firm_item(copy / "results")
    items = book.load_items("resmlp")
    judged = items[(items.verdict != "") & items["class"].isin(["reduced", "analysis"])]
    shaky = judged[[book.provisional(it) == SHORT_SCHEDULE for _, it in judged.iterrows()]]
    assert len(shaky) >= 1
    page = book.chapter("resmlp", book.build_ledger(write=False))
    assert page.count("Provisional: trained at the 3-epoch `cpu` profile") == len(shaky)
    status_rows = [line for line in page.splitlines() if line.startswith("| ") and "| regenerated |" in line]
    assert sum("(provisional)" in line for line in status_rows) == len(shaky)
    assert f"({len(shaky)} provisional: trained far from the plateau" in book.status_line("resmlp", book.build_ledger(write=False))
    assert book.ledger_page(book.build_ledger(write=False)).count('class="provisional"') >= len(shaky)
    assert 'title: "ResMLP (complete, provisional verdicts)"' in book.toc(book.build_ledger(write=False))


def test_a_provisional_firm_verdict_counts_as_inconclusive_everywhere(copy):
    """Runs short of the plateau cannot resolve a claim: a provisional item's "reproduced" or "not
    reproduced" counts as inconclusive in the ledger, the chapter status and the claims page, while
    its page still says what the notebook concluded."""
    from vitmlp.profiles import signature
    item = {"class": "reduced", "profile": "cpu", "profile_signature": None}
    assert book.counted_verdict({**item, "verdict": "reproduced"}) == "inconclusive at this scale"
    assert book.counted_verdict({**item, "verdict": "not reproduced"}) == "inconclusive at this scale"
    assert book.counted_verdict({**item, "verdict": ""}) == ""
    assert book.counted_verdict({**item, "profile_signature": signature("cpu"), "verdict": "reproduced"}) \
        == "reproduced"
    _unsigned_firm_item(copy / "results")
    items = book.load_items("resmlp").drop_duplicates(["item", "class"], keep="last")
    firm = [(it["item"], it["class"], it["verdict"]) for _, it in items.iterrows()
            if it["verdict"] in ("reproduced", "not reproduced") and book.provisional(it)]
    assert firm
    led = book.build_ledger(write=False)
    for item_, cls, raw in firm:
        row = led[(led.paper == "resmlp") & (led.item == item_) & (led["class"] == cls)]
        assert row.verdict.tolist() == ["inconclusive at this scale"]
    shown = book.chapter("resmlp", led)
    assert shown.count("is not counted: they cannot resolve the claim") == len(firm)
    every = book.load_items().drop_duplicates(["paper", "item", "class"], keep="last")
    n_firm = sum(it["verdict"] in ("reproduced", "not reproduced") and bool(book.provisional(it))
                 for _, it in every.iterrows())
    assert book.ledger_page(led).count("is not counted: they cannot resolve the claim") == n_firm


def test_a_table_is_shown_without_its_index_and_with_a_dash_for_missing_cells():
    from vitmlp.plots import show
    html = show(pd.DataFrame({"row": ["a", "b"], "top-1": [81.234, None]}), {"top-1": "{:.1f}"}).to_html()
    assert 'class="dataframe"' in html and "81.2" in html and "—" in html
    assert ">0<" not in html and ">1<" not in html and "81.234" not in html


def test_a_column_of_sentences_keeps_a_reading_width():
    from vitmlp.plots import PROSE_CHARS, show
    why = "interval [-5.4, +8.2] includes 0; read at 2x epochs (DeiT-style training: still rose +2.3)"
    assert len(why) > PROSE_CHARS
    html = show(pd.DataFrame({"row": ["a", "b"], "ours": [1.0, 2.0], "why": [why, ""]})).to_html()
    assert html.count("min-width: 32em") == 1 and why in html   # one CSS rule, for the why column only


def test_a_float_column_without_a_format_is_never_shown_with_six_decimals():
    import re
    from vitmlp.plots import show
    df = pd.DataFrame({"top-1": [99.7, 81.25], "wall_time_s": [227.4863, 1200.0], "lr": [0.004, 1e-5],
                       "loss": [0.12345, 2.0], "seed": [0, 1]})
    cells = re.findall(r">([^<>]+)</td>", show(df, {"loss": "{:.3f}"}).to_html())
    assert cells == ["99.70", "227.5", "0.004", "0.123", "0", "81.25", "1200.0", "1e-05", "2.000", "1"]


def test_a_chapter_shows_an_items_gpu_profile_result_beside_the_books(copy, monkeypatch):
    import json
    src, dst = copy / "results" / "resmlp", copy / "results" / "profiles" / "gpu" / "resmlp"
    dst.mkdir(parents=True)
    side = json.loads((src / "table3.reduced.json").read_text())
    for f in side["files"]:
        shutil.copy(src / f, dst / f)
    from dataclasses import replace
    from vitmlp.profiles import PROFILES, signature
    monkeypatch.setitem(PROFILES, "gpu", replace(PROFILES["gpu"], provisional=""))  # as once calibrated
    (dst / "table3.reduced.json").write_text(json.dumps({**side, "profile": "gpu", "verdict": "reproduced",
                                                         "profile_signature": signature("gpu"),
                                                         "summary": "settled at the larger scale"}))
    book.main()
    index = book.chapter_text("resmlp")
    [head] = [line for line in index.splitlines() if line.startswith("| item ")]
    assert head.endswith("| verdict at gpu |")
    [row] = [line for line in index.splitlines() if line.startswith("| Table 3 | reduced ")]
    assert f"| {side['verdict']}" in row and row.endswith(" | cpu | reproduced |")
    section = index.split("### Table 3 (reduced)")[1].split("\n### ")[0]
    assert section.index("#### At the `cpu` profile") < section.index("#### At the `gpu` profile")
    assert "**Verdict: reproduced.** settled at the larger scale" in section
    png = next(f for f in side["files"] if f.endswith(".png"))
    assert f"(../../results/profiles/gpu/resmlp/{png})" in section
    assert "Not run at `gpu` yet." in index.split("### Table 4 (reduced)")[1]


def test_every_model_family_has_one_colour_across_the_book():
    from vitmlp.plots import FAMILY_COLORS, family, family_color
    assert [family(n) for n in ("Mixer-B/16", "mixer_S16", "ViT-B/16", "vit_S", "DeiT-S", "ResMLP-S12", "resmlp_B24",
                                "timm:resnet18", "Convolutional networks", "BiT-R152x4", "bag of patches", "Swin-B")] == \
        ["Mixer", "Mixer", "ViT", "ViT", "ViT", "ResMLP", "ResMLP", "convnet", "convnet", "BiT", "bag of patches", "other"]
    assert family_color("Mixer-B/16") != family_color("ViT-B/16") == family_color("DeiT-S")
    assert len(set(FAMILY_COLORS.values())) == len(FAMILY_COLORS)


def test_a_figure_on_a_notebook_page_says_what_it_shows(copy):
    """Alt text of a cell's figure: its section and the page's title, never the image's file name."""
    book.main()
    nb = nbformat.read(copy / "book" / "mlp-mixer" / "table3_scratch.ipynb", as_version=4)
    drawn = [c for c in nb.cells if any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert drawn
    for c in drawn:
        alt = c.metadata["mystnb"]["image"]["alt"]
        assert alt.startswith("Figure: ") and "(Table 3 — Mixer and ViT trained from scratch" in alt
    assert drawn[0].metadata["mystnb"]["image"]["alt"].startswith("Figure: The comparisons and their verdicts")
    assert not any("classes" in c.metadata["mystnb"]["image"] for c in drawn)


def test_a_diagram_on_a_notebook_page_keeps_its_natural_size(copy):
    """The class a diagram's output carries reaches the cell's image options (what myst-nb reads)."""
    book.main()
    nb = nbformat.read(copy / "book" / "mlp-mixer" / "figure1_architecture.ipynb", as_version=4)
    [drawn] = [c for c in nb.cells if any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert drawn.metadata["mystnb"]["image"]["classes"] == "diagram"
    assert "```{container} diagram-scroll" in book.chapter_text("mlp-mixer")      # and on the chapter page


def test_a_number_format_leaves_the_text_cells_of_its_column_alone():
    import re
    from vitmlp.plots import show
    df = pd.DataFrame({"paper": [76.6, "crash", None], "runs": [3, 3, 3]})
    assert re.findall(r">([^<>]+)</td>", show(df, {"paper": "{:.1f}"}).to_html()) == \
        ["76.6", "3", "crash", "3", "—", "3"]


def test_every_chapter_page_is_committed_with_the_cells_that_re_run_it():
    """Colab's launch button opens book/<paper>/index.ipynb from the repository: it must be there, with
    the re-run cells the generator writes now."""
    ledger = pd.read_csv(REPO / "results" / "ledger.csv", dtype=str, keep_default_na=False)
    for paper in book.PAPERS:
        committed = nbformat.read(REPO / "book" / paper / "index.ipynb", as_version=4)
        fresh = book.chapter_notebook(paper, ledger)
        assert [c.source for c in committed.cells[1:]] == [c.source for c in fresh.cells[1:]]
        assert committed.cells[0].source.startswith(f"# {book.PAPERS[paper][0]}")


def test_a_table_keeps_a_named_index_as_data_and_drops_a_row_number():
    from vitmlp.plots import show
    df = pd.DataFrame({"layer": [1, 1, 2], "model": ["S12", "S24", "S12"], "A": [0.5, 0.25, 0.125]})
    pivot = show(df.pivot_table(index="layer", columns="model", values="A")).to_html()
    assert ">layer<" in pivot and ">0.125<" in pivot and ">—<" in pivot   # the pivot's index is a column
    plain = show(df).to_html()
    assert 'class="row_heading' not in plain                   # no 0..n row numbers


def test_a_page_the_runner_writes_into_the_book_is_published_at_once(copy, monkeypatch):
    """`make table3` writes book/<paper>/<page>.ipynb: it must not wait for `make book` to lose its
    stderr (a page committed between the two showed progress bars and warnings)."""
    from vitmlp import run
    page = copy / "book" / "resmlp" / "table3_ablations.ipynb"
    nb = nbformat.read(page, as_version=4)
    nb.cells = [c for c in nb.cells if book.VERDICT_TAG not in c.metadata.get("tags", [])]
    code = next(c for c in nb.cells if c.cell_type == "code" and not book.is_install_cell(c))
    code.outputs.append(nbformat.v4.new_output("stream", name="stderr", text="runs: 100%|██████████| 2/2\n"))

    def execute(nb_path, params, out_dir):   # the kernel's output as papermill leaves it
        nbformat.write(nb, out_dir / "resmlp" / nb_path.name)
        return out_dir / "resmlp" / nb_path.name
    monkeypatch.setattr(run, "execute", execute)
    run.main(["--paper", "resmlp", "--item", "table3"])
    published = nbformat.read(page, as_version=4)
    assert not [o for c in published.cells for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert sum(book.VERDICT_TAG in c.metadata.get("tags", []) for c in published.cells) == 1


def test_a_measured_item_names_the_hardware_it_was_measured_on(copy):
    """Speed ratios depend on the kind of CPU (Mixer vs ViT flips between AVX2 and AVX-512): every
    measured item says where it ran, from its sidecar, on its chapter page and in its verdict block."""
    items = book.load_items("three-things-vit")
    measured = items[items["class"] == "measured"]
    assert len(measured) >= 2
    page = book.chapter("three-things-vit", book.build_ledger(write=False))
    for _, it in measured.iterrows():
        m = it["machine"]
        where = f"{m['cpu']} ({m['cpu_isa']}), {m['torch_threads']} torch thread(s)"
        assert book.measured_on(it) == where and f"Measured on {where}." in page
        assert f"**Measured on** {where}" in book.verdict_block(measured[measured.item == it["item"]])
    assert book.measured_on(items[items["class"] == "exact"].iloc[0]) == ""
    newer = {**measured.iloc[0], "machine": {**measured.iloc[0]["machine"], "cpu_id": "family 23 model 1"}}
    assert book.measured_on(newer).startswith(f"{newer['machine']['cpu']} (family 23 model 1, ")


def test_a_measured_item_keeps_its_last_measurement_on_each_kind_of_hardware(copy, monkeypatch):
    """A speed verdict can flip with the kind of CPU (Mixer Table 3: not reproduced on AVX2, reproduced
    on AVX-512 BF16): a new measurement replaces only its own kind's, and the pages show every kind."""
    from vitmlp import records, results
    real, n_items = records.provenance, len(book.load_items())
    kept = (copy / "results/mlp-mixer/hardware/table2.measured.avx512-bf16.json").read_bytes()

    def on(isa):
        def provenance():
            p = real()
            return {**p, "machine": {**p["machine"], "cpu_isa": isa, "gpu": None}}
        return provenance
    monkeypatch.setattr(results, "provenance", on("AMX"))
    results.save_item("mlp-mixer", "Table 2", "measured", profile="cpu", source="test", verdict="not reproduced",
                      table=pd.DataFrame({"model": ["Mixer-H/14"], "host img/s": [1.5]}), summary="on AMX")
    m = results.measurements("mlp-mixer", "Table 2")
    assert list(m.hardware) == ["AMX", "AVX2", "AVX-512 BF16"] and list(m.table[0]["host img/s"]) == [1.5]
    assert results.measurements("mlp-mixer", "Table 2", tables=False).table.isna().all()   # sidecars only
    assert (copy / "results/mlp-mixer/hardware/table2.measured.avx512-bf16.json").read_bytes() == kept
    assert len(book.load_items()) == n_items   # a kind's copy is not an item of its own
    items = book.load_items("mlp-mixer")
    it = items[(items["item"] == "Table 2") & (items["class"] == "measured")].iloc[-1]
    block = book.verdict_block(pd.DataFrame([it]))
    assert "AMX (" in block and "*not reproduced*; AVX2 (2026-11-26): *reproduced*; AVX-512 BF16 (2026-11-22): " \
        "*reproduced*" in block
    page = book.chapter("mlp-mixer", book.build_ledger(write=False))
    assert "The last measurement on each kind of hardware (3; the newest counts)" in page
    for p in (copy / "results/three-things-vit/hardware").glob("figure4.measured.avx512-bf16.*"):
        p.unlink()   # Figure 4 measured on one kind only: no such line
    f4 = book.load_items("three-things-vit").query("item == 'Figure 4'").iloc[-1]
    assert book.on_each_hardware(f4).empty and "each kind of hardware" not in book.verdict_block(pd.DataFrame([f4]))


def test_a_hardware_kind_names_its_files_as_make_bench_does():
    from vitmlp.bench import bench_name
    from vitmlp.records import hardware_kind, kind_slug
    assert kind_slug("AVX-512 BF16") == "avx512-bf16" and bench_name("AVX-512 BF16") == "bench-avx512-bf16"
    assert kind_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert hardware_kind({"cpu_isa": "AVX2", "gpu": "NVIDIA H200"}) == "NVIDIA H200"
    assert hardware_kind({"cpu_isa": "AVX2", "gpu": None}) == "AVX2" and hardware_kind(None) == "unrecorded hardware"


def _as_trained(copy, h, hours, machine, status="ok"):
    """Make the copied record ``h`` one that took ``hours`` on ``machine``."""
    p = copy / "results" / "runs" / f"{h}.json"
    rec = json.loads(p.read_text())
    p.write_text(json.dumps({**rec, "train_time_s": hours * 3600, "machine": machine, "status": status}))


AVX2 = {"cpu": "AMD EPYC", "cpu_isa": "AVX2", "cores": 2, "torch_threads": 2}


def test_a_missing_items_row_says_what_its_notebook_still_has_to_train(copy):
    """The backlog a collect wrote (scripts/next_queues.py) is counted against the records at each build: a
    run recorded since is no longer to train; hours are the sum of the runs left times the pace the AVX2
    kind's recorded runs kept against their estimate, rounded up."""
    from vitmlp.results import build_ledger
    for paper in ("scaled-relu", "three-things-vit"):   # the two reduced Table 1s missing, whatever is trained now
        for p in (copy / "results" / paper).glob("table1.reduced.*"):
            p.unlink()
    ledger = build_ledger(write=False)
    (copy / "results" / "backlog.json").unlink(missing_ok=True)
    assert "still to train" not in book.chapter("scaled-relu", ledger)   # no backlog written: no column
    recorded, twin = (p.stem for p in sorted((copy / "results" / "runs").glob("*.json"))[:2])
    _as_trained(copy, recorded, 13.5, AVX2)   # 1.5x its estimate of 9 h
    log = {"profile": "cpu", "collected": "2026-12-03T14:00:00+00:00", "notebooks": {
        "scaled-relu/table1_stability": {"complete": False, "runs": {recorded: 9.0, "f" * 16: 1.2, "e" * 16: 0.4}},
        # regenerated items whose notebook waits on a longer twin (Table 7 and text share it)
        "scaled-relu/table7+text_data_fraction": {"complete": True, "runs": {recorded: 9.0, "d" * 16: 2.0}},
        "three-things-vit/table1_baselines": {"complete": True, "runs": {"a" * 16: 2.5}},
        "three-things-vit/table1_speed": {"complete": True, "runs": {}}}}
    (copy / "results" / "backlog.json").write_text(json.dumps(log))
    assert "still to train" not in book.chapter("resmlp", ledger)   # nothing of it left to train: no column
    rows = {}
    for paper in ("scaled-relu", "three-things-vit"):
        page = book.chapter(paper, ledger)
        head = next(x for x in page.splitlines() if x.startswith("| item |"))
        assert head.endswith("| still to train |") and "*Still to train*: " in page and "(2026-12-03," in page
        assert "x 1.5, what the 1 runs of the backlog recorded on the AVX2 kind took" in page
        rows[paper] = [x for x in page.splitlines() if x.startswith("| Table 1 |")]
    assert rows["scaled-relu"] == ["| Table 1 | reduced | missing | — | — | 2 of 3 runs, ~3 h on 2 AVX2 cores; "
                                   "more may follow |"]   # 1.6 h x 1.5
    assert rows["three-things-vit"][-1] == "| Table 1 | reduced | missing | — | — | 1 of 1 runs, ~4 h on 2 AVX2 cores |"
    assert all(x.endswith("| — |") for x in rows["three-things-vit"][:-1])   # regenerated rows: nothing to train
    page = book.chapter("scaled-relu", ledger).splitlines()
    waits = [x for x in page if x.startswith(("| Table 7 |", "| text |"))]
    assert [x.split(" | ")[1] for x in waits] == ["reduced", "exact", "reduced"]
    assert [x.endswith("| 1 of 2 runs, ~3 h on 2 AVX2 cores |") for x in waits] == [True, False, True]  # 2 h x 1.5
    log["notebooks"]["scaled-relu/table7+text_data_fraction"]["runs"] = {recorded: 9.0, twin: 2.0}
    (copy / "results" / "backlog.json").write_text(json.dumps(log))   # the twin recorded: nothing left
    assert all(x.endswith("| — |") for x in book.chapter("scaled-relu", ledger).splitlines()
               if x.startswith(("| Table 7 |", "| text |")))


def test_the_estimates_pace_is_what_each_kinds_recorded_runs_took_against_it(copy):
    """Hours over estimated hours, summed per kind of hardware; a run two notebooks share counts once,
    a crash and a run without a record not at all."""
    a, b, c, d = (p.stem for p in sorted((copy / "results" / "runs").glob("*.json"))[:4])
    _as_trained(copy, a, 2.0, AVX2)
    _as_trained(copy, b, 3.0, {**AVX2, "cpu_id": "family 23 model 1"})   # one kind, whatever its generation
    _as_trained(copy, c, 0.1, {**AVX2, "gpu": "NVIDIA H200"})
    _as_trained(copy, d, 5.0, AVX2, status="crash")
    log = {"profile": "cpu", "notebooks": {"x/one": {"complete": True, "runs": {a: 1.0, b: 3.0, d: 1.0, "f" * 16: 1.0}},
                                           "x/two": {"complete": True, "runs": {b: 3.0, c: 1.0}}}}
    pace = book.estimate_pace(log)
    assert list(pace.index) == ["AVX2", "NVIDIA H200"]   # slowest first
    assert pace.loc["AVX2"].to_dict() == {"runs": 2, "hours": 5.0, "estimate": 4.0, "low": 1.0, "high": 2.0,
                                          "pace": 1.25}
    assert pace.loc["NVIDIA H200"].runs == 1 and pace.loc["NVIDIA H200"].pace == pytest.approx(0.1)
    assert book.estimate_pace({}).empty
    note = book._to_train_note({**log, "collected": "2026-12-03"}, pace)[0]
    assert "x 1.2, what the 2 runs of the backlog recorded on the AVX2 kind took against it (5 h for 4 " \
           "estimated; single runs 1.0-2.0x" in note and "NVIDIA H200 0.10x (1 runs)" in note
    note = book._to_train_note({**log, "collected": "2026-12-03"}, pace.drop(index="AVX2"))[0]
    assert "not yet checked against a run recorded on the AVX2 kind" in note
