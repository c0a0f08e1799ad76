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


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to clone the repository")
def test_the_install_cell_installs_the_library_in_a_fresh_kernel(tmp_path, monkeypatch):
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", str(REPO), str(tmp_path / "repo")], check=True)
    # "Colab": a new environment that sees every installed package except vitmlp
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    pre = tmp_path / "preinstalled"
    pre.mkdir()
    for p in _site_packages(sys.executable).iterdir():
        if "vitmlp" not in p.name:
            (pre / p.name).symlink_to(p)
    (_site_packages(python) / "colab_preinstalled.pth").write_text(f"{pre}\n")
    check = subprocess.run([str(python), "-c", "import importlib.util as u; import torch, timm, papermill; "
                            "print(u.find_spec('vitmlp') is None)"], capture_output=True, text=True, check=True)
    assert check.stdout.strip() == "True"
    # the book's copy of the notebook, published with the repository URL set to the clone
    cfg = tmp_path / "bookcfg"
    cfg.mkdir()
    (cfg / "_config.yml").write_text((REPO / "book" / "_config.yml").read_text().replace(
        book.repo_url(), (tmp_path / "repo").as_uri()))
    monkeypatch.setenv("VITMLP_BOOK", str(cfg))
    content = tmp_path / "content"
    content.mkdir()
    nb = content / "notebook.ipynb"
    shutil.copy(REPO / "book" / NOTEBOOK, nb)
    item = {"paper": "resmlp", "item": "Figure 1", "class": "schematic", "profile": "cpu", "claim": "", "summary": "",
            "verdict": "", "files": [], "git": {"commit": commit}}
    book.publish(nb, pd.DataFrame([item]))
    [install] = [c for c in nbformat.read(nb, as_version=4).cells if book.is_install_cell(c)]
    assert f"git+{(tmp_path / 'repo').as_uri()}@{commit}" in install.source
    env = {k: v for k, v in os.environ.items() if not k.startswith("VITMLP_")}
    env.update(VITMLP_CACHE=str(tmp_path / "cache"), VITMLP_PROGRESS="0", PYTHONPATH="")
    run = subprocess.run([str(python), "-m", "papermill", str(nb), str(content / "out.ipynb"), "-p", "profile", "smoke"],
                         cwd=content, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    where = subprocess.run([str(python), "-c", "import vitmlp; print(vitmlp.__file__)"], capture_output=True,
                           text=True, check=True, env=env).stdout
    assert where.startswith(str(tmp_path / "venv"))           # installed by the cell, not the repository's
    assert list((content / "results").rglob("figure1.schematic.json"))
