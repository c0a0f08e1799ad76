"""A notebook page opened in Colab: a fresh Python with torch and friends preinstalled but not the
book's library. Its install cell, pointed (through book/_config.yml's repository URL) at a local
``git+file://`` clone, must install the library at the pinned commit and the notebook must run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from vitmlp import book

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = "resmlp/figure1_architecture.ipynb"   # draws from code: seconds at smoke


def _site_packages(python) -> Path:
    out = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """A clone of the repository at HEAD and "Colab": a new environment that sees every installed
    package except vitmlp. Returns (folder, python, commit)."""
    tmp = tmp_path_factory.mktemp("colab")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", str(REPO), str(tmp / "repo")], check=True)
    # the branch a chapter page clones (book/_config.yml), here at HEAD even if the checkout is detached
    subprocess.run(["git", "-C", str(tmp / "repo"), "checkout", "-q", "-B", book.book_config()["repository"]["branch"]],
                   check=True)
    venv.create(tmp / "venv", with_pip=True)
    python = tmp / "venv" / "bin" / "python"
    pre = tmp / "preinstalled"
    pre.mkdir()
    for p in _site_packages(sys.executable).iterdir():
        if "vitmlp" not in p.name:
            (pre / p.name).symlink_to(p)
    (_site_packages(python) / "colab_preinstalled.pth").write_text(f"{pre}\n")
    check = subprocess.run([str(python), "-c", "import importlib.util as u; import torch, timm, papermill; "
                            "print(u.find_spec('vitmlp') is None)"], capture_output=True, text=True, check=True)
    assert check.stdout.strip() == "True"
    return tmp, python, commit


def _published_here(tmp_path, monkeypatch, clone: Path) -> Path:
    """A book configuration whose repository URL is the local clone; returns the page's folder."""
    cfg = tmp_path / "bookcfg"
    cfg.mkdir()
    (cfg / "_config.yml").write_text((REPO / "book" / "_config.yml").read_text().replace(
        book.repo_url(), clone.as_uri()))
    monkeypatch.setenv("VITMLP_BOOK", str(cfg))
    content = tmp_path / "content"
    content.mkdir()
    return content


def _run(python, nb: Path, env_extra: dict, *params: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VITMLP_")}
    env.update(PYTHONPATH="", VITMLP_PROGRESS="0", **env_extra)
    return subprocess.run([str(python), "-m", "papermill", str(nb), str(nb.parent / "out.ipynb"), *params],
                          cwd=nb.parent, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to clone the repository")
def test_the_install_cell_installs_the_library_in_a_fresh_kernel(colab, tmp_path, monkeypatch):
    folder, python, commit = colab
    content = _published_here(tmp_path, monkeypatch, folder / "repo")
    nb = content / "notebook.ipynb"
    shutil.copy(REPO / "book" / NOTEBOOK, nb)
    item = {"paper": "resmlp", "item": "Figure 1", "class": "schematic", "profile": "cpu", "claim": "", "summary": "",
            "verdict": "", "files": [], "git": {"commit": commit}}
    book.publish(nb, pd.DataFrame([item]))
    [install] = [c for c in nbformat.read(nb, as_version=4).cells if book.is_install_cell(c)]
    assert f"git+{(folder / 'repo').as_uri()}@{commit}" in install.source
    run = _run(python, nb, {"VITMLP_CACHE": str(tmp_path / "cache")}, "-p", "profile", "smoke")
    assert run.returncode == 0, run.stderr[-3000:]
    where = subprocess.run([str(python), "-c", "import vitmlp; print(vitmlp.__file__)"], capture_output=True,
                           text=True, check=True, env={**os.environ, "PYTHONPATH": ""}).stdout
    assert where.startswith(str(folder / "venv"))           # installed by the cell, not the repository's
    assert list((content / "results").rglob("figure1.schematic.json"))


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to clone the repository")
def test_a_chapter_page_opened_in_colab_clones_the_repository_and_re_runs_an_item(colab, tmp_path, monkeypatch):
    folder, python, _ = colab
    content = _published_here(tmp_path, monkeypatch, folder / "repo")
    ledger = pd.read_csv(REPO / "results" / "ledger.csv", dtype=str, keep_default_na=False)
    nb = content / "index.ipynb"
    nbformat.write(book.chapter_notebook("resmlp", ledger), nb)
    run = _run(python, nb, {"VITMLP_CACHE": str(tmp_path / "cache")},
               "-p", "PROFILE", "smoke", "-p", "ITEM", "figure1")
    assert run.returncode == 0, run.stderr[-3000:]
    clone = content / "vitmlp-book"                          # cloned by the cell, then run there
    assert (clone / "notebooks" / "resmlp").is_dir()
    assert list((clone / "results" / "profiles" / "smoke" / "resmlp").glob("figure1.schematic.json"))
    assert not list((clone / "results" / "profiles" / "smoke").glob("*/table3*"))   # one item only
