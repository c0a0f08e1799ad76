"""Write the book's generated pages (chapters, claims ledger, table of contents) from results/.

Run by ``make book`` before ``jupyter-book build``; nothing here trains or measures.
"""
from __future__ import annotations

import html
import math
import os
import re
from pathlib import Path

import nbformat
import pandas as pd
import yaml

from .profiles import BOOK_PROFILE
from .reference import PAPERS
from .records import hardware_kind, load_record
from .results import (ITEM_FIELDS, REPO, VERDICTS, backlog, build_ledger, counted_verdict, load_items, makes,
                      measurements, profile_root, provisional, records_for, results_dir)
from .stats import claimed


def book_root() -> Path:
    """The Jupyter Book's source folder: ``$VITMLP_BOOK`` (tests build into a temporary one), else ``<repo>/book``."""
    return Path(os.environ.get("VITMLP_BOOK") or REPO / "book")


LONG_DECIMAL = re.compile(r"^-?\d+\.\d{4,}$")  # 90.775000001 in a CSV: shown as 90.78


def cell_text(v) -> str:
    """One table cell as shown: ``—`` for missing, long decimals rounded to 2 places."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and v.strip() in ("", "nan")):
        return "—"
    if isinstance(v, float):
        return f"{v:.2f}".rstrip("0").rstrip(".") if abs(v) < 1e6 else f"{v:.3g}"
    v = str(v)
    return f"{float(v):.2f}" if LONG_DECIMAL.match(v) else v


def table_md(df: pd.DataFrame) -> str:
    """A Markdown table that cannot garble: no index, ``|`` escaped in every cell, no truncation
    (the book's CSS scrolls a table wider than the column inside it)."""
    if not len(df):
        return "_(none yet)_"

    def esc(v):
        return cell_text(v).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    rows = [[esc(c) for c in df.columns], ["---"] * len(df.columns)]
    rows += [[esc(v) for v in r] for r in df.itertuples(index=False)]
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


_md = table_md


def _notebooks(paper: str) -> list[Path]:
    """The chapter's executed notebooks in the paper's order (their first item's place in the
    catalog; appendix items come last there)."""
    from .results import catalog, slug
    cat = catalog()
    order = {slug(i): n for n, i in enumerate(cat[cat.paper == paper]["item"].drop_duplicates())}
    first = lambda nb: min((order.get(s, len(order)) for s in nb.stem.split("_")[0].split("+")),  # noqa: E731
                           default=len(order))
    return sorted((nb for nb in (book_root() / paper).glob("*.ipynb") if nb.stem != CHAPTER_PAGE),
                  key=lambda nb: (first(nb), nb.stem))


# --- the repository and Colab: one URL, in book/_config.yml -------------------------------------
def book_config() -> dict:
    return yaml.safe_load((book_root() / "_config.yml").read_text())


def repo_url() -> str:
    """Where the repository is published (``repository.url`` in book/_config.yml): the launch
    buttons and every notebook's install cell use it."""
    return book_config()["repository"]["url"].rstrip("/")


def colab_link(rel: str) -> str:
    """Colab's address of ``book/<rel>`` (a notebook) in the published repository."""
    repo = book_config()["repository"]
    where = re.sub(r"^https?://github\.com/", "", repo["url"].rstrip("/"))
    return (f"https://colab.research.google.com/github/{where}/blob/{repo.get('branch', 'main')}/"
            f"{repo.get('path_to_book', 'book')}/{rel}")


INSTALL_TAG = "remove-cell"
INSTALL = """# Colab / fresh kernels: install the book's library if it is missing (no-op in the repository).
# Colab has torch already: pip keeps it (the library needs torch>=2.4).
import importlib.util, subprocess, sys
if importlib.util.find_spec("vitmlp") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+{url}@{ref}"], check=True)"""


def install_source(ref: str) -> str:
    return INSTALL.format(url=repo_url(), ref=ref)


CHAPTER_PAGE = "index"   # book/<paper>/index.ipynb: the chapter page, a notebook so that it has launch buttons
RERUN = """# Re-run this chapter through the book's runner: `make {paper} PROFILE=...` in the repository.
# Outside the repository (Colab), this cell clones it (branch {branch}) and installs its library first.
import subprocess, sys
from pathlib import Path
root = next((p for p in [Path.cwd(), *Path.cwd().parents] if (p / "notebooks" / "{paper}").is_dir()), None)
if root is None:
    root = Path("vitmlp-book").resolve()
    if not root.exists():
        subprocess.run(["git", "clone", "-q", "--branch", "{branch}", "{url}", str(root)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", str(root)], check=True)
cmd = [sys.executable, "-m", "vitmlp.run", "--paper", "{paper}", "--profile", PROFILE]
subprocess.run(cmd + (["--item", ITEM] if ITEM else []), cwd=root, check=True)"""
RERUN_PARAMETERS = """# "smoke" takes minutes and checks the pipeline; "cpu" is the book's own profile (its
# committed runs are reused); "colab" trains on CIFAR-100 on a Colab GPU (nothing is
# downloaded: set os.environ["VITMLP_DATA"] to the folder of its files first).
PROFILE = "smoke"
ITEM = ""   # one item, e.g. "table3"; "" re-runs every notebook of the chapter"""


def chapter_notebook(paper: str, ledger: pd.DataFrame) -> nbformat.NotebookNode:
    """The chapter page as a notebook: its text, then the cells that re-run the whole chapter (what
    the page's Colab launch button opens). Fixed cell ids: writing it twice gives the same file."""
    branch = book_config()["repository"].get("branch", "main")
    cells = [nbformat.v4.new_markdown_cell(chapter(paper, ledger)),
             nbformat.v4.new_markdown_cell(
                 "## Re-run this chapter\n\nThe launch button at the top of this page opens it in Colab; run its "
                 "cells to re-run every notebook of the chapter (or one item) at the profile you choose. Runs "
                 "already in the cache are reused; a profile other than the book's writes under "
                 "`results/profiles/<profile>/` and never over the book's numbers."),
             nbformat.v4.new_code_cell(RERUN_PARAMETERS, metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell(RERUN.format(paper=paper, branch=branch, url=repo_url()),
                                       metadata={"tags": ["hide-input"]})]
    for c, name in zip(cells, ["chapter", "rerun-text", "rerun-parameters", "rerun"]):
        c["id"] = name
    return nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}})


def chapter_text(paper: str) -> str:
    """The written chapter page's text (its first cell)."""
    return nbformat.read(book_root() / paper / f"{CHAPTER_PAGE}.ipynb", as_version=4).cells[0].source


def is_install_cell(cell) -> bool:
    return cell.cell_type == "code" and INSTALL_TAG in cell.metadata.get("tags", []) and "pip" in cell.source


# --- a notebook page as the reader sees it -----------------------------------------------------
VERDICT_TAG = "vitmlp-verdict"


def _provisional_count(paper: str) -> int:
    items = load_items(paper)
    return sum(bool(it["verdict"]) and bool(provisional(it)) for _, it in items.iterrows())


def verdict_block(items: pd.DataFrame) -> str:
    """Claim / Result / Verdict of the items a notebook made, from their sidecars."""
    out = []
    for _, it in items.iterrows():
        head = f"**{it['item']}** ({it['class']}, profile `{it['profile']}`)"
        lines = [head]
        if it["claim"]:
            lines.append(f"- **Claim.** {it['claim']}")
        if it["summary"]:
            lines.append(f"- **Result.** {it['summary']}")
        if where := measured_on(it):
            lines.append(f"- **Measured on** {where}: a ratio between rows holds on this kind of hardware; "
                         "another kind may rank them differently.")
            if each := _each_hardware_line(it):
                lines.append(f"- **On each kind of hardware measured** (the newest counts): {each}.")
        if it["verdict"]:
            counts = _row_counts(it)
            lines.append(f"- **Verdict: {counted_verdict(it)}.**" + (f" Rows{' as the notebook judged them' if provisional(it) else ''}: {counts}." if counts else ""))
            if why := provisional(it):
                lines.append(f"- **Provisional:** {why}.{_not_counted(it)}")
        out.append("\n".join(lines))
    body = "\n\n".join(out) if out else "This notebook has not recorded an item yet."
    return f"```{{admonition}} Claim, result and verdict\n:class: tip\n{body}\n```"


def appendix_items() -> pd.DataFrame:
    """The appendix's sidecars (results/appendix/<name>.json) in the shape of :func:`load_items`."""
    import json
    recs = [json.loads(p.read_text()) for p in sorted((results_dir() / "appendix").glob("*.json"))]
    return pd.DataFrame([{**r, "paper": "appendix", "item": r.get("name", ""), "class": "appendix",
                          "verdict": "", "claim": ""} for r in recs],
                        columns=ITEM_FIELDS)


def on_each_hardware(it) -> pd.DataFrame:
    """A measured item's last verdict on every kind of hardware it was measured on, newest first;
    empty unless there are two or more kinds."""
    if it["class"] != "measured":
        return pd.DataFrame()
    m = measurements(it["paper"], it["item"], it["profile"], tables=False)   # the page shows the verdicts
    if len(m) < 2:
        return pd.DataFrame()
    return pd.DataFrame({"hardware": m.hardware, "CPU": [(x or {}).get("cpu", "") for x in m.machine],
                         "threads": [(x or {}).get("torch_threads", "") for x in m.machine],
                         "measured": m.time.str[:10], "verdict": m.verdict, "result": m.summary})


def _each_hardware_line(it) -> str:
    kinds = on_each_hardware(it)
    return "; ".join(f"{r.hardware} ({r.measured}): *{r.verdict or 'no verdict'}*" for r in kinds.itertuples())


def measured_on(it) -> str:
    """The hardware of a measured item: 'AMD EPYC (AVX2), 2 torch threads' or the GPU; "" otherwise."""
    m = it.get("machine")
    if it["class"] != "measured" or not isinstance(m, dict):
        return ""
    cpu = ", ".join(x for x in (m.get("cpu_id"), m.get("cpu_isa", "vector ISA not recorded")) if x)
    return m.get("gpu") or f"{m.get('cpu') or 'an unnamed CPU'} ({cpu}), " \
        f"{m.get('torch_threads')} torch thread(s)"


def _not_counted(it) -> str:
    """What a provisional item's notebook concluded, where it is not what the item counts as."""
    raw = it["verdict"]
    return "" if counted_verdict(it) == raw else \
        f" The notebook's verdict on these runs, *{raw}*, is not counted: they cannot resolve the claim."


def _row_counts(it) -> str:
    """'6 reproduced, 5 inconclusive at this scale, ...' over the rows of the item's CSV."""
    for f in it["files"]:
        if f.endswith(".csv"):
            df = pd.read_csv(results_dir() / it["paper"] / f, dtype=str, keep_default_na=False)
            if "verdict" in df:
                v = claimed(df.verdict).value_counts()
                return ", ".join(f"{n} {k}" for k, n in v.items())
    return ""


def publish(path: Path, items: pd.DataFrame) -> bool:
    """Bring an executed notebook into the book's form (idempotent): a Claim / Result / Verdict
    block under its title, code cells folded, stderr dropped (warnings and progress bars belong to
    the run's log), the install cell on the configured repository at the commit that made the
    items. Returns whether the file changed."""
    nb = nbformat.read(path, as_version=4)
    before = nbformat.writes(nb)
    nb.cells = [c for c in nb.cells if VERDICT_TAG not in c.metadata.get("tags", [])]
    commits = [str((g or {}).get("commit") or "") for g in items["git"]] if len(items) else []
    ref = next((c for c in commits if c), book_config()["repository"].get("branch", "main"))
    for c in nb.cells:
        if "outputs" in c:  # warnings and progress bars are the run's log, not the page
            c.outputs = [o for o in c.outputs if not (o.output_type == "stream" and o.name == "stderr")]
        if is_install_cell(c):
            c.source = install_source(ref)
        elif c.cell_type == "code" and "hide-input" not in c.metadata.get("tags", []) \
                and INSTALL_TAG not in c.metadata.get("tags", []):
            c.metadata["tags"] = [*c.metadata.get("tags", []), "hide-input"]
    figure_options(nb)
    title = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
    block = nbformat.v4.new_markdown_cell(verdict_block(items), metadata={"tags": [VERDICT_TAG]})
    block["id"] = VERDICT_TAG  # a fixed id: publishing twice gives the same file
    nb.cells.insert(title + 1, block)
    after = nbformat.writes(nb)
    if after != before:
        from .records import atomic_write_bytes
        atomic_write_bytes(path, after.encode())
    return after != before


def publish_pages(pages) -> int:
    """:func:`publish` each executed notebook ``book/<paper>/<name>.ipynb`` with its items; the
    number of pages that changed."""
    items = pd.concat([load_items(), appendix_items()], ignore_index=True)
    return sum(publish(nb, items[items.source == f"notebooks/{nb.parent.name}/{nb.name}"]) for nb in pages)


HEADING = re.compile(r"^#{1,4} +(.+)$", re.M)


def figure_options(nb) -> None:
    """Give every figure a cell draws an alt text saying what it shows (the section it stands in, and
    the page), instead of its file name, and its image class: myst-nb's per-cell ``mystnb.image``."""
    page = section = ""
    for c in nb.cells:
        if c.cell_type == "markdown" and (heads := HEADING.findall(c.source)):
            page, section = page or heads[0], heads[-1]
        elif pngs := [o for o in c.get("outputs", []) if "image/png" in o.get("data", {})]:
            alt = section if section == page else f"{section} ({page})"
            image = c.metadata.setdefault("mystnb", {}).setdefault("image", {})
            image["alt"] = f"Figure: {alt}".replace("*", "")
            # a diagram's class (plots.show_figures_legibly puts it in the output; myst-nb reads the cell's)
            if classes := {o.get("metadata", {}).get("image/png", {}).get("classes") for o in pngs} - {None}:
                image["classes"] = " ".join(sorted(classes))


def status_line(paper: str, ledger: pd.DataFrame) -> str:
    """'23 of 23 items regenerated; verdicts: 5 reproduced, ...' or 'not started'."""
    led = ledger[ledger.paper == paper]
    done = (led.status == "regenerated").sum()
    if not (book_root() / paper).is_dir() or not _notebooks(paper):
        return f"not started: {done} of {len(led)} items (exact numbers only)" if done else "not started"
    v = led.verdict[led.verdict != ""].value_counts()
    state = "complete" if done == len(led) else "in progress"
    n_prov = _provisional_count(paper)
    return f"{state}: {done} of {len(led)} items regenerated" + (
        "; verdicts: " + ", ".join(f"{n} {k}" for k, n in v.items()) if len(v) else "") + (
        f" ({n_prov} provisional: trained far from the plateau, counted as inconclusive until re-run)" if n_prov else "")


def estimate_pace(log: dict) -> pd.DataFrame:
    """What the backlog's recorded runs took against the collect's estimate of their hours, per kind of
    hardware (:func:`records.hardware_kind`): runs, hours, estimated hours, ``pace`` (hours / estimate)
    and the lowest and highest single run's ratio; one row per kind, slowest pace first."""
    store = records_for(log.get("profile", BOOK_PROFILE))
    runs = {h: est for nb in log.get("notebooks", {}).values() for h, est in nb["runs"].items() if est > 0}
    rows = []
    for h, est in runs.items():
        rec = load_record(h, store)
        if rec is not None and rec["status"] == "ok" and rec.get("train_time_s"):
            rows.append({"kind": hardware_kind(rec["machine"]), "hours": rec["train_time_s"] / 3600, "estimate": est})
    df = pd.DataFrame(rows, columns=["kind", "hours", "estimate"]).assign(ratio=lambda d: d.hours / d.estimate)
    out = df.groupby("kind").agg(runs=("ratio", "size"), hours=("hours", "sum"), estimate=("estimate", "sum"),
                                 low=("ratio", "min"), high=("ratio", "max"))
    return out.assign(pace=out.hours / out.estimate).sort_values("pace", ascending=False)


CPU_KIND = "AVX2"   # the slower kind of CPU the still-to-train hours are stated for


def to_train(paper: str, item: str, log: dict, pace: float = 1.0, source: str | None = None) -> str:
    """What the notebooks making an item still lack, counted from the records now: '13 of 45 runs,
    ~9 h on 2 AVX2 cores' (their estimated hours x ``pace``; '' where the backlog names no run of it).
    A regenerated item gives its ``source`` (the ledger's): only that notebook counts, and only if it
    lacks runs."""
    store = records_for(log.get("profile", BOOK_PROFILE))
    out = []
    for name, nb in log.get("notebooks", {}).items():
        if name.split("/")[0] != paper or not makes(name, item) or not nb["runs"]:
            continue
        left = [h for h in nb["runs"] if load_record(h, store) is None]
        if source is not None and (Path(source).stem != name.split("/")[-1] or not left):
            continue
        more = "" if nb["complete"] else "; more may follow"   # the collect stopped at these runs' numbers
        out.append(f"{len(left)} of {len(nb['runs'])} runs" + (
            f", ~{math.ceil(pace * sum(nb['runs'][h] for h in left))} h on 2 {CPU_KIND} cores{more}" if left else more))
    return "; ".join(out)


def _to_train_note(log: dict, pace: pd.DataFrame) -> list[str]:
    estimate = ("the collect's estimate (forward multiply-adds x images, twice with SAM, at `make bench`'s "
                f"{CPU_KIND} rates)")
    if CPU_KIND in pace.index:
        p = pace.loc[CPU_KIND]
        hours = (f"the hours are {estimate} x {p.pace:.1f}, what the {int(p.runs)} runs of the backlog recorded on the "
                 f"{CPU_KIND} kind took against it ({p.hours:.0f} h for {p.estimate:.0f} estimated; single runs "
                 f"{p.low:.1f}-{p.high:.1f}x: evaluation, two runs sharing the cores and the CPU's generation are "
                 "outside the estimate)")
    else:
        hours = f"the hours are {estimate}, not yet checked against a run recorded on the {CPU_KIND} kind"
    others = "; ".join(f"{k} {r.pace:.2f}x ({int(r.runs)} runs)" for k, r in pace.drop(index=CPU_KIND, errors="ignore")
                       .iterrows())
    return [f"*Still to train*: the runs an item's notebook has no record of (a missing item's, or a regenerated "
            f"item's whose notebook waits on more, such as a plateau check's longer twins), counted at this build among "
            f"those a collect found it would train ({log['collected'][:10]}, `scripts/next_queues.py`, which also "
            f"queues them for a GPU); {hours}." + (f" The other kinds' runs took, against the estimate: {others}."
                                                   if others else "") +
            " *More may follow*: the notebook's collect stopped where it needs these runs' "
            "numbers, so later runs of it (a plateau check, say) are not counted yet.", ""]


def chapter(paper: str, ledger: pd.DataFrame) -> str:
    title, cite, question = PAPERS[paper]
    led = ledger[ledger.paper == paper].drop(columns="paper")
    done = (led.status == "regenerated").sum()
    status = status_line(paper, ledger)
    out = [f"# {title}", "", f"*{cite}.* **Question.** {question}", ""]
    if not status.startswith("complete"):
        out += ["```{note}", f"This chapter is {status}. Items marked `missing` below have no page yet.", "```", ""]
    nbs = _notebooks(paper)
    if nbs:
        out += ["## Notebooks", "", "Each page opens with its claim, result and verdict; the launch button "
                "(or the Colab link here) re-runs it. To re-run the whole chapter, see the last section of this "
                "page.", ""]
        out += [f"- [{nb.stem}]({nb.name}) — [open in Colab]({colab_link(f'{paper}/{nb.name}')})" for nb in nbs]
        out += [""]
    own = load_items(paper).drop_duplicates(["item", "class"], keep="last")
    shaky = {(it["item"], it["class"]) for _, it in own.iterrows() if it["verdict"] and provisional(it)}
    led["verdict"] = [f"{v} (provisional)" if (i, c) in shaky else v
                      for i, c, v in zip(led["item"], led["class"], led["verdict"])]
    others = other_profiles(paper)
    for profile, its in others.items():   # a second column: the same item's verdict at that profile
        v = its.drop_duplicates(["item", "class"], keep="last")
        v = v.assign(verdict=[counted_verdict(it) + (" (provisional)" if it["verdict"] and provisional(it) else "")
                              for _, it in v.iterrows()])[["item", "class", "verdict"]]
        led = led.merge(v.rename(columns={"verdict": f"verdict at {profile}"}), on=["item", "class"],
                        how="left").fillna("")
    log = backlog()
    # a regenerated item counts too where its notebook waits on runs (a plateau check's longer twins, say)
    mine = any(name.split("/")[0] == paper for name in log.get("notebooks", {}))
    pace = estimate_pace(log) if mine else pd.DataFrame(columns=["pace"])
    left = [to_train(paper, i, log, pace.pace.get(CPU_KIND, 1.0), None if s == "missing" else src) if mine else ""
            for i, s, src in zip(led["item"], led["status"], led["source"])]
    if any(left):   # a column only where some item still has runs to train
        led["still to train"] = left
    out += [f"## Status of every item ({done} of {len(led)} regenerated)", "",
            "Derived from the files in `results/` (see the [claims ledger](../ledger.md)).", "",
            table_md(led.drop(columns="source")), "", *(_to_train_note(log, pace) if any(left) else [])]
    out += exact_section(paper)
    items = own[own["class"] != "exact"]
    keys = list(dict.fromkeys([(it["item"], it["class"]) for _, it in items.iterrows()]
                              + [(it["item"], it["class"]) for o in others.values() for _, it in o.iterrows()]))
    if keys:
        out += ["## Regenerated items", ""]
        if others:
            out += [f"Each item at the book's profile (`{BOOK_PROFILE}`), then at "
                    + ", ".join(f"`{p}`" for p in others) + " where it has been run there (its own runs and "
                    "verdict: a claim the smaller scale cannot resolve may be settled at the larger one).", ""]
    for key in keys:
        out += [f"### {key[0]} ({key[1]})", ""]
        for profile, its in {BOOK_PROFILE: items, **others}.items():
            it = its[(its["item"] == key[0]) & (its["class"] == key[1])]
            if others:
                out += [f"#### At the `{profile}` profile", ""]
            out += item_block(it.iloc[-1], paper) if len(it) else [f"Not run at `{profile}` yet.", ""]
    return "\n".join(out)


def exact_section(paper: str) -> list[str]:
    """The chapter's exact numbers (results/<paper>/exact.csv), one folded table per item."""
    exact = results_dir() / paper / "exact.csv"
    if not exact.exists():
        return []
    df = pd.read_csv(exact, dtype=str, keep_default_na=False)
    n_ok = (df.match == "true").sum()
    # `make exact` writes the table, except for a chapter whose code notebook writes it (dual-patchnorm)
    exact_items = load_items(paper).query("`class` == 'exact'")
    sources = sorted(set(exact_items.source)) or ["src/vitmlp/exact.py"]  # three-things: also a notebook
    by = ", ".join("`make exact`" if s == "src/vitmlp/exact.py" else f"`{s}`" for s in sources)
    out = ["## Exact numbers: the paper's values and this book's", "",
           f"Computed from the full-size model definitions in `src/vitmlp` by {by}; {n_ok} of {len(df)} values "
           "match the paper at its printed precision, the others carry the reason in `note`."
           + (" FLOPs are multiply-adds counted with fvcore at 224×224, as in the papers."
              if "src/vitmlp/exact.py" in sources else ""), ""]
    for item, group in df.groupby("item", sort=False):
        out += [f"### {item}", "", "````{dropdown} " + f"{len(group)} values, {(group.match == 'true').sum()} match",
                table_md(group.drop(columns="item")), "````", ""]
    return out


SHOWN_BESIDE = ("gpu", "colab")   # profiles whose results are committed (.gitignore) and shown beside cpu's


def other_profiles(paper: str) -> dict[str, pd.DataFrame]:
    """{profile: its items of ``paper``} for the published profiles besides the book's that have any
    (a local smoke run never reaches a page)."""
    found = {p: load_items(paper, profile=p) for p in SHOWN_BESIDE}
    return {p: its[its["class"] != "exact"] for p, its in found.items() if (its["class"] != "exact").any()}


def item_block(it, paper: str) -> list[str]:
    """An item on its chapter page: claim, verdict and result, its figures and tables, provenance."""
    root = results_dir() if it["profile"] == BOOK_PROFILE else profile_root(it["profile"])
    out = [f"**Claim.** {it['claim']}", ""] if it["claim"] else []
    if it["verdict"]:
        out += [f"**Verdict: {counted_verdict(it)}.** {it['summary']}", ""]
        if why := provisional(it):
            out += ["```{warning}", f"Provisional: {why}.{_not_counted(it)}", "```", ""]
    elif it["summary"]:
        out += [it["summary"], ""]
    for f in it["files"]:
        rel = os.path.relpath(root / paper / f, book_root() / paper)
        if f.endswith(".png"):
            img = f"![{it['item']} ({it['class']}): {it['claim'] or it['summary'][:120]}]({rel})"
            # a diagram keeps its natural size (legible text) and scrolls sideways in the column
            out += ["```{container} diagram-scroll", img, "```", ""] if it["class"] == "schematic" else [img, ""]
        elif f.endswith(".csv"):
            df = pd.read_csv(root / paper / f, dtype=str, keep_default_na=False)
            out += ["````{dropdown} " + f"The table ({len(df)} rows)", table_md(df), "````", ""]
    if len(kinds := on_each_hardware(it)):
        out += ["````{dropdown} " + f"The last measurement on each kind of hardware ({len(kinds)}; the newest counts)",
                table_md(kinds), "````", ""]
    where = f" Measured on {hw}." if (hw := measured_on(it)) else ""
    return out + [f"Profile `{it['profile']}`, made by `{it['source']}` at commit "
                  f"`{str((it['git'] or {}).get('commit') or '')[:8]}`.{where}", ""]


def ledger_page(ledger: pd.DataFrame) -> str:
    """One row per claim (an item with a verdict): its text, the book's result, the verdict,
    links to the chapter and the notebook page; counts per verdict per paper; sortable."""
    items = load_items().drop_duplicates(["paper", "item", "class"], keep="last")
    claims = items[items.verdict != ""].copy()
    claims["why"] = [provisional(c) + _not_counted(c) for _, c in claims.iterrows()]
    claims["verdict"] = [counted_verdict(c) for _, c in claims.iterrows()]
    counts = (claims.groupby(["paper", "verdict"]).size().unstack(fill_value=0)
              .reindex(columns=[v for v in VERDICTS if v in set(claims.verdict)]).reset_index())
    status = pd.DataFrame({"paper": list(PAPERS), "status": [status_line(p, ledger) for p in PAPERS]})
    rows = []
    for _, c in claims.iterrows():
        nb = Path(str(c["source"])).stem
        page = f"{c['paper']}/{nb}.html" if (book_root() / c["paper"] / f"{nb}.ipynb").exists() else None
        why = c["why"]
        rows.append("<tr>" + "".join(f"<td>{x}</td>" for x in [
            f'<a href="{c["paper"]}/index.html">{html.escape(c["paper"])}</a>',
            html.escape(f"{c['item']} ({c['class']})"), html.escape(c["claim"] or "—"),
            html.escape(c["summary"] or "—"), f'<span class="verdict">{html.escape(c["verdict"])}</span>'
            + (f' <span class="provisional" title="{html.escape(why)}">(provisional)</span>'
               if why else ""),
            f'<a href="{page}">notebook</a>' if page else "—"]) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ["paper", "item", "claim", "this book's result", "verdict", "page"])
    return "\n".join([
        "# Claims ledger", "",
        "Every claim the book tests, with the paper's statement, this book's result and the verdict; "
        "click a column header to sort. Rebuilt from `results/` on every `make book`. A verdict marked "
        "*(provisional)* was trained at a profile whose runs stop short of their plateau, or at an earlier "
        "definition of its profile (hover over it for the reason and the notebook's own verdict): its runs cannot "
        "resolve the claim, so it counts as inconclusive until it is re-run.", "",
        "## Chapters", "", table_md(status), "",
        "## Verdicts per paper", "", table_md(counts), "",
        f"## Claims ({len(claims)})", "",
        '<div class="ledger-wrap"><table class="sortable ledger">',
        f"<thead><tr>{head}</tr></thead><tbody>", *rows, "</tbody></table></div>", "",
        "## All items", "", "Every table and figure of the five papers, one row per class.", "",
        "````{dropdown} " + f"{len(ledger)} items", table_md(ledger), "````", ""])


def toc(ledger: pd.DataFrame) -> str:
    lines = ["format: jb-book", "root: intro", "parts:", "  - caption: Papers", "    chapters:"]
    for paper in PAPERS:
        lines.append(f"      - file: {paper}/{CHAPTER_PAGE}")
        status = status_line(paper, ledger)
        state = status.split(":")[0] + (", provisional verdicts" if "provisional" in status else "")
        lines.append(f"        title: \"{_short(paper)} ({state})\"")
        nbs = _notebooks(paper)
        if nbs:
            lines.append("        sections:")
            lines += [f"          - file: {paper}/{nb.stem}" for nb in nbs]
    lines += ["  - caption: Results", "    chapters:", "      - file: ledger"]
    appendix = sorted((book_root() / "appendix").glob("*.ipynb")) + sorted((book_root() / "appendix").glob("*.md"))
    if appendix:
        lines += ["  - caption: Appendix", "    chapters:"]
        lines += [f"      - file: appendix/{p.stem}" for p in appendix]
    return "\n".join(lines) + "\n"


def _short(paper: str) -> str:
    return PAPERS[paper][0].split(":")[0]


STATUS_START, STATUS_END = "<!-- status:start -->", "<!-- status:end -->"


def landing_status(ledger: pd.DataFrame) -> str:
    rows = pd.DataFrame({"chapter": [f"[{_short(p)}]({p}/{CHAPTER_PAGE}.ipynb)" for p in PAPERS],
                         "status": [status_line(p, ledger) for p in PAPERS]})
    return "\n".join([STATUS_START, "", "## Where the book stands", "", table_md(rows), "", STATUS_END])


def main() -> None:
    ledger = build_ledger()
    for paper in PAPERS:
        (book_root() / paper).mkdir(parents=True, exist_ok=True)
        page = book_root() / paper / f"{CHAPTER_PAGE}.ipynb"
        text = nbformat.writes(chapter_notebook(paper, ledger))
        if not page.exists() or page.read_text() != text:
            page.write_text(text)
        (book_root() / paper / f"{CHAPTER_PAGE}.md").unlink(missing_ok=True)   # the page before it was a notebook
    changed = publish_pages(sorted(p for p in book_root().glob("*/*.ipynb") if p.stem != CHAPTER_PAGE))
    (book_root() / "ledger.md").write_text(ledger_page(ledger))
    (book_root() / "_toc.yml").write_text(toc(ledger))
    intro = (book_root() / "intro.md").read_text() if (book_root() / "intro.md").exists() else ""
    if STATUS_START in intro:
        head, rest = intro.split(STATUS_START, 1)
        intro = head + landing_status(ledger) + rest.split(STATUS_END, 1)[1]
        (book_root() / "intro.md").write_text(intro)
    print(f"book pages written to {book_root()}: {(ledger.status == 'regenerated').sum()} of "
          f"{len(ledger)} catalog items regenerated; {changed} notebook pages brought into the book's form")


if __name__ == "__main__":
    main()
