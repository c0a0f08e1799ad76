"""Write the book's generated pages (chapters, claims ledger, table of contents) from results/.

Run by ``make book`` before ``jupyter-book build``; nothing here trains or measures.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from .results import REPO, build_ledger, load_items, results_dir

BOOK = Path(os.environ.get("VITMLP_BOOK", REPO / "book"))
PAPERS = {
    "three-things-vit": ("Three things everyone should know about Vision Transformers",
                         "Touvron et al., 2022",
                         "Are parallel blocks as good as deeper ones, is fine-tuning attention "
                         "enough, and does a patch-wise MLP stem help?"),
    "mlp-mixer": ("MLP-Mixer: An all-MLP Architecture for Vision", "Tolstikhin et al., 2021",
                  "Can token-mixing and channel-mixing MLPs alone match CNNs and ViTs, and what "
                  "are their inductive biases?"),
    "scaled-relu": ("Scaled ReLU Matters for Training Vision Transformers", "Wang et al., 2022",
                    "Does a convolutional stem with BatchNorm + ReLU stabilise and improve ViT "
                    "training?"),
    "dual-patchnorm": ("Dual PatchNorm", "Kumar et al., 2023",
                       "Do two LayerNorms around the patch embedding beat every LayerNorm "
                       "placement inside the block?"),
    "resmlp": ("ResMLP: Feedforward networks for image classification with data-efficient "
               "training", "Touvron et al., 2021",
               "Is a residual network of linear patch mixing and per-patch MLPs competitive, "
               "and which of its components matter?"),
}


def _md(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False) if len(df) else "_(none yet)_"


def _notebooks(paper: str) -> list[Path]:
    return sorted((BOOK / paper).glob("*.ipynb"))


def chapter(paper: str, ledger: pd.DataFrame) -> str:
    title, cite, question = PAPERS[paper]
    led = ledger[ledger.paper == paper].drop(columns="paper")
    done = (led.status == "regenerated").sum()
    out = [f"# {title}", "", f"*{cite}.* **Question.** {question}", "",
           f"## Status of every item ({done} of {len(led)} regenerated)", "",
           "Derived from the files in `results/` (see the claims ledger).", "", _md(led), ""]
    exact = results_dir() / paper / "exact.csv"
    if exact.exists():
        df = pd.read_csv(exact, dtype=str, keep_default_na=False)
        n_ok = (df.match == "true").sum()
        out += ["## Exact numbers: the paper's values and this book's", "",
                f"Computed from the full-size model definitions in `src/vitmlp` by "
                f"`make exact`; {n_ok} of {len(df)} values match the paper at its printed "
                "precision, the others carry the reason in `note`. FLOPs are multiply-adds "
                "counted with fvcore at 224×224, as in the papers.", ""]
        for item, group in df.groupby("item", sort=False):
            out += [f"### {item}", "", _md(group.drop(columns="item")), ""]
    items = load_items(paper)
    items = items[items["class"] != "exact"]
    if len(items):
        out += ["## Regenerated items", ""]
    for _, it in items.iterrows():
        out += [f"### {it['item']} ({it['class']})", ""]
        if it["claim"]:
            out += [f"**Claim.** {it['claim']}", ""]
        if it["verdict"]:
            out += [f"**Verdict: {it['verdict']}.** {it['summary']}", ""]
        elif it["summary"]:
            out += [it["summary"], ""]
        for f in it["files"]:
            rel = os.path.relpath(results_dir() / paper / f, BOOK / paper)
            if f.endswith(".png"):
                out += [f"![{it['item']}]({rel})", ""]
            elif f.endswith(".csv"):
                out += [_md(pd.read_csv(results_dir() / paper / f, dtype=str, keep_default_na=False)), ""]
        out += [f"Profile `{it['profile']}`, made by `{it['source']}` at commit "
                f"`{str((it['git'] or {}).get('commit') or '')[:8]}`.", ""]
    nbs = _notebooks(paper)
    if nbs:
        out += ["## Notebooks", "", *[f"- [{nb.stem}]({nb.name})" for nb in nbs], ""]
    return "\n".join(out)


def ledger_page(ledger: pd.DataFrame) -> str:
    summary = ledger.groupby(["paper", "status"]).size().unstack(fill_value=0).reset_index()
    verdicts = ledger[ledger.verdict != ""]
    return "\n".join([
        "# Claims ledger", "",
        "Every table and figure of the five papers, one row per class (see the introduction for "
        "what each class means), rebuilt from `results/ledger.csv`.", "",
        "## Summary", "", _md(summary), "",
        "## Verdicts on the papers' claims", "", _md(verdicts), "",
        "## All items", "", _md(ledger), ""])


def toc() -> str:
    lines = ["format: jb-book", "root: intro", "parts:", "  - caption: Papers", "    chapters:"]
    for paper in PAPERS:
        lines.append(f"      - file: {paper}/index")
        nbs = _notebooks(paper)
        if nbs:
            lines.append("        sections:")
            lines += [f"          - file: {paper}/{nb.stem}" for nb in nbs]
    lines += ["  - caption: Results", "    chapters:", "      - file: ledger"]
    appendix = sorted((BOOK / "appendix").glob("*.ipynb")) + sorted((BOOK / "appendix").glob("*.md"))
    if appendix:
        lines += ["  - caption: Appendix", "    chapters:"]
        lines += [f"      - file: appendix/{p.stem}" for p in appendix]
    return "\n".join(lines) + "\n"


def main() -> None:
    ledger = build_ledger()
    for paper in PAPERS:
        (BOOK / paper).mkdir(parents=True, exist_ok=True)
        (BOOK / paper / "index.md").write_text(chapter(paper, ledger))
    (BOOK / "ledger.md").write_text(ledger_page(ledger))
    (BOOK / "_toc.yml").write_text(toc())
    print(f"book pages written to {BOOK}: {(ledger.status == 'regenerated').sum()} of "
          f"{len(ledger)} catalog items regenerated")


if __name__ == "__main__":
    main()
