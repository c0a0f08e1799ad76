"""Every notebook runs at the smoke profile through papermill; bad parameters write nothing;
the book builds from results."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import papermill as pm
import pytest

from vitmlp import run as runner
from vitmlp.results import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*/*.ipynb"))




def test_notebooks_have_parameters_and_no_outputs():
    assert NOTEBOOKS
    import nbformat
    for nb_path in NOTEBOOKS:
        nb = nbformat.read(nb_path, as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{nb_path.name}: needs exactly one cell tagged 'parameters'"
        # papermill must see every parameter (it skips lines it cannot parse, e.g. "=" in a comment)
        import ast
        assigned = [t.id for node in ast.parse(tagged[0].source).body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)]
        assert "profile" in assigned and list(pm.inspect_notebook(str(nb_path))) == assigned, nb_path
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
            f"{nb_path.name} has stored outputs"


def _library_work_in(nb_path) -> list[str]:
    """What issue 13 keeps out of a notebook's code: a comparison with the profile's name (a Profile
    field says what differs), a ``raise`` (vitmlp.choices checks parameters) and a ``source=`` given
    to save_item / save_appendix (the runner names the notebook)."""
    import ast
    import nbformat
    from IPython.core.inputtransformer2 import TransformerManager
    from vitmlp.profiles import PROFILES
    found = []
    for i, cell in enumerate(nbformat.read(nb_path, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(TransformerManager().transform_cell(cell.source))):
            where = f"{nb_path.parent.name}/{nb_path.name} cell {i} line {getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Raise):
                found.append(f"{where}: raise")
            elif isinstance(node, ast.Compare) and any(
                    (isinstance(s, ast.Name) and s.id == "profile") or (isinstance(s, ast.Constant) and s.value in PROFILES)
                    for s in (node.left, *node.comparators)):
                found.append(f"{where}: compares the profile's name")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in (
                    "save_item", "save_appendix") and any(k.arg == "source" for k in node.keywords):
                found.append(f"{where}: source=")
        if 'source="notebooks/' in cell.source:
            found.append(f"{nb_path.parent.name}/{nb_path.name} cell {i}: its own path as a source")
    return found


def test_notebooks_leave_checks_profiles_and_sources_to_the_library():
    problems = [p for nb in NOTEBOOKS for p in _library_work_in(nb)]
    assert not problems, "\n".join(problems)


def test_the_scan_finds_what_it_keeps_out(tmp_path):
    import nbformat
    cells = ['if profile == "smoke":\n    x = 1', 'y = 2 if P.name != "cpu" else 3', 'if x < 0:\n    raise ValueError("x")',
             'save_item("resmlp", "Table 3", "reduced", profile=profile, source=SRC)', 'ok = x in ("a", "b")']
    nb_path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), nb_path)
    assert [p.split(": ")[1] for p in _library_work_in(nb_path)] == \
        ["compares the profile's name", "compares the profile's name", "raise", "source="]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_notebook_runs_at_smoke(nb, sandbox):
    import json
    out = runner.execute(nb, {"profile": "smoke"}, sandbox / "book")
    assert out.exists()
    written = list((sandbox / "results").rglob("*.json"))
    assert written, "a notebook must record what it made"
    sources = {json.loads(p.read_text()).get("source") for p in written if p.parent.name != "runs"}
    assert sources == {f"notebooks/{nb.parent.name}/{nb.name}"}, "items name the notebook that made them"


@pytest.mark.parametrize("params, error", [
    ({"profile": "laptop"}, "valid choices: smoke"),
    ({"profile": "smoke", "seeds": -3}, "seeds must be"),
])
def test_bad_parameters_fail_at_once_and_write_nothing(params, error, sandbox):
    nb = REPO / "notebooks" / "appendix" / "dataset.ipynb"
    with pytest.raises((pm.PapermillExecutionError, SystemExit), match=error):  # SystemExit: refused before a kernel
        runner.execute(nb, params, sandbox / "book")
    assert not (sandbox / "results").exists()
    assert not (sandbox / "book").exists() or not any((sandbox / "book").rglob("*.ipynb"))


@pytest.mark.parametrize("nb, params, error", [
    ("resmlp/table3_ablations", {"rows": ["S12", "S13"]}, "unknown rows entry 'S13'; valid choices: S12, S24, B24"),
    ("resmlp/table3_ablations", {"rows": ["S24"]}, r"rows must include 'S12': the baseline; got \['S24'\]"),
    ("three-things-vit/table3_memory", {"batches": [8, 8]}, "batches must be a list of at least 2 different values"),
])
def test_bad_notebook_parameters_are_refused_by_the_library(nb, params, error, sandbox):
    with pytest.raises(pm.PapermillExecutionError, match=error):
        runner.execute(REPO / "notebooks" / f"{nb}.ipynb", {"profile": "smoke", **params}, sandbox / "book")
    assert not (sandbox / "results").exists()


def test_unknown_parameter_or_item_refused():
    nb = REPO / "notebooks" / "appendix" / "dataset.ipynb"
    with pytest.raises(SystemExit, match="unknown parameter"):
        runner.check_parameters(nb, {"profile": "smoke", "epochz": 3})
    with pytest.raises(SystemExit, match="unknown paper"):
        runner.find("resnet")
    with pytest.raises(SystemExit, match="no notebook"):
        runner.find("appendix", "table99")


def test_find_matches_every_item_a_notebook_names(tmp_path, monkeypatch):
    for name in ("table2+figure4_external", "table3_ablations", "table30_other", "figure1_diagram"):
        (tmp_path / "resmlp").mkdir(exist_ok=True)
        (tmp_path / "resmlp" / f"{name}.ipynb").write_text("{}")
    monkeypatch.setattr(runner, "NOTEBOOKS", tmp_path)
    stems = lambda *a: [p.stem for p in runner.find(*a)]  # noqa: E731
    assert stems("resmlp", "figure4") == stems("resmlp", "table2") == ["table2+figure4_external"]
    assert stems("resmlp", "Figure 4") == stems("resmlp", "Table 2") == ["table2+figure4_external"]  # CATALOG's names
    assert stems("resmlp", "table3") == ["table3_ablations"]        # not table30
    assert len(stems("resmlp")) == 4 and stems(None, "figure1") == ["figure1_diagram"]


def test_book_builds_from_committed_results(tmp_path):
    """The README's book command, on a copy: generated pages, then Jupyter Book's HTML."""
    shutil.copytree(REPO / "results", tmp_path / "results")
    shutil.copytree(REPO / "book", tmp_path / "book", ignore=shutil.ignore_patterns("_build"))
    env = {**os.environ, "VITMLP_RESULTS": str(tmp_path / "results"), "VITMLP_BOOK": str(tmp_path / "book")}
    subprocess.run([sys.executable, "-m", "vitmlp.book"], env=env, check=True)
    jb = Path(sys.executable).parent / "jupyter-book"
    subprocess.run([str(jb), "build", str(tmp_path / "book"), "--quiet"], env=env, check=True)
    html = tmp_path / "book" / "_build" / "html"
    assert (html / "index.html").exists() and (html / "ledger.html").exists()
    page = (html / "resmlp" / "index.html").read_text()
    assert "Exact numbers" in page and "115.7" in page


def test_built_book_passes_the_browser_check(tmp_path):
    """Every page opened in headless Chromium: no broken link or image, no console error of ours,
    no stderr text, nothing wider than the column (scripts/check_book.py, make check-book)."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    sys.path.insert(0, str(REPO / "scripts"))
    from check_book import check
    shutil.copytree(REPO / "results", tmp_path / "results")
    shutil.copytree(REPO / "book", tmp_path / "book", ignore=shutil.ignore_patterns("_build"))
    env = {**os.environ, "VITMLP_RESULTS": str(tmp_path / "results"), "VITMLP_BOOK": str(tmp_path / "book")}
    subprocess.run([sys.executable, "-m", "vitmlp.book"], env=env, check=True)
    subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build", str(tmp_path / "book"), "--quiet"],
                   env=env, check=True)
    assert check(tmp_path / "book" / "_build" / "html") == []


def test_the_browser_check_finds_what_a_reader_would_see_as_broken(tmp_path):
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    sys.path.insert(0, str(REPO / "scripts"))
    from check_book import check
    (tmp_path / "ok.html").write_text("<html><body><article class='bd-article' style='width:600px'>"
                                      "<p>fine</p><a href='ok.html'>self</a></article></body></html>")
    (tmp_path / "bad.html").write_text(
        "<html><body><article class='bd-article' style='width:600px'>"
        "<table style='width:2000px'><tr><td>wide</td></tr></table><img src='missing.png'>"
        "<a href='gone.html'>gone</a><pre>runs: 100%|##########| 38/38 [00:00<?, ?run/s]</pre>"
        "<script>undefinedFunction()</script></article></body></html>")
    problems = check(tmp_path)
    assert all(p.startswith("bad.html: ") for p in problems)
    for what in ("too wide", "image does not load", "broken link", "stderr or progress text", "console error"):
        assert any(what in p for p in problems), (what, problems)


@pytest.mark.parametrize("argv, results, to_book", [
    (["--profile", "cpu"], None, True),
    (["--profile", "gpu"], "profiles/gpu", False),
    (["--profile", "cpu", "-p", "weights", "timm"], "profiles/cpu-timm-weights", False),
])
def test_only_the_book_profile_on_book_weights_writes_the_book(argv, results, to_book, monkeypatch):
    # a private environment: main() sets VITMLP_RESULTS for the notebooks it runs
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in ("VITMLP_RESULTS", "VITMLP_OUT")})
    seen, published = [], []

    def execute(nb, params, out):
        seen.append((params, out, os.environ.get("VITMLP_RESULTS")))
        return out / nb.parent.name / nb.name
    monkeypatch.setattr(runner, "execute", execute)
    monkeypatch.setattr(runner, "publish_pages", published.extend)   # only a page written into the book
    monkeypatch.setattr(runner, "check_parameters", lambda nb, params: None)  # where things go, whatever the notebook
    runner.main(["--paper", "appendix", *argv])
    params, out, res = seen[0]
    assert (out == REPO / "book") == to_book
    assert bool(published) == to_book and all(p.parent == REPO / "book" / "appendix" for p in published)
    assert (res is None) if results is None else res.endswith(results)


def test_executed_copies_keep_the_last_frame_of_a_progress_bar(tmp_path):
    import nbformat
    from vitmlp.run import compact
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=t) for t in ("\rruns: 1/2", "\rruns: 2/2\n")] \
        + [nbformat.v4.new_output("stream", name="stdout", text="done\r\n"),
           nbformat.v4.new_output("stream", name="stderr", text="warn\n")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    compact(path)
    out = nbformat.read(path, as_version=4).cells[0].outputs
    assert [(o.name, o.text) for o in out] == [("stderr", "runs: 2/2\n"), ("stdout", "done\n"), ("stderr", "warn\n")]


def test_convergence_notebook_trains_its_sweep_when_asked(sandbox):
    """At smoke with missing="train": the sweep's runs are trained, tabulated, checked for doubling;
    the candidate's 1x / 2x runs (3 seeds) give the results contract convergence.csv."""
    import pandas as pd
    nb = REPO / "notebooks" / "appendix" / "convergence.ipynb"
    runner.execute(nb, {"profile": "smoke", "missing": "train", "sweep_epochs": [1, 2], "candidates": [[2e-3, 1, 0.7]]},
                   sandbox / "book")
    table = pd.read_csv(sandbox / "results" / "appendix" / "sweep.csv")
    assert set(table.epochs) == {1, 2} and (table.n == 2).all()      # the sweep's 2 seeds, the ResNet once
    assert {"ViT-S", "ResMLP-S12", "Mixer-S/16", "bag of patches", "ResNet-18"} == set(table.model)
    import json
    side = json.loads((sandbox / "results" / "appendix" / "sweep.json").read_text())
    assert len(side["doubling"]) == 9          # 1 -> 2 epochs for 4 baselines x 2 widths + the ResNet
    conv = pd.read_csv(sandbox / "results" / "appendix" / "convergence.csv")
    assert list(conv.columns[:5]) == ["model", "schedule", "top1_mean", "top1_std", "n"]
    # the candidate asked for, then the profile's own point (checked even when not asked for)
    assert len(conv) == 20 and set(conv.schedule) == {"1x", "2x"} and (conv.n == 3).all()
    assert [tuple(x) for x in conv[["lr", "difficulty"]].drop_duplicates().values] == [(2e-3, 0.7), (1e-3, 0.5)]
    targets = json.loads((sandbox / "results" / "appendix" / "convergence.json").read_text())["targets"]
    assert [t["model"] for t in targets] == ["ViT-S", "ResMLP-S12", "Mixer-S/16", "bag of patches", "ResNet-18"] * 2
    shortcuts = pd.read_csv(sandbox / "results" / "appendix" / "shortcuts.csv")   # read, never trained here
    assert set(shortcuts.status) == {"no record"} and len(shortcuts) == 16   # 4 settings x 2 schedules x 2 models
