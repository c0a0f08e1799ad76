"""The five papers' own printed numbers, transcribed once, so the book can show them beside ours.

One long-format CSV per paper (``<paper>.csv`` next to this file, columns
``item,row,quantity,value,note``). Values are kept as the printed strings ("17.60" stays
"17.60") because the printed precision decides what "matches" means; see README.md.

    >>> paper_value("three-things-vit", "Table 3", "S24x2", "params_M")
    '85.9'
    >>> paper_number("three-things-vit", "Table 3", "S24x2", "params_M")   # the same cell, as a float
    85.9
    >>> printed_decimals("17.60")
    2
"""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

import pandas as pd

from ..choices import check_choice

# The five papers: file stem -> (title, citation, the question the book asks of it), in the book's order.
PAPERS = {
    "three-things-vit": ("Three things everyone should know about Vision Transformers", "Touvron et al., 2022",
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
COLUMNS = ["item", "row", "quantity", "value", "note"]

# CATALOG.md items whose content is only drawn (plots, diagrams) or is code/mathematics: they have
# no printed number to transcribe. Items with a few numbers quoted in the text or caption (e.g.
# three-things Figure 4, Mixer Figure 4) are in the CSVs instead, with the sentence in `note`.
NO_PRINTED_VALUES = {
    "three-things-vit": {"Figure 1": "plotted only", "Figure 3": "plotted only",
                         "Figure 5": "diagram", "Algorithm 1": "code listing"},
    "mlp-mixer": {"Figure 1": "diagram", "Figure 3": "plotted only", "Figure 5": "weights drawn",
                  "Figure 6": "weights drawn", "Figure 7": "weights drawn", "Listing 1": "code listing"},
    "scaled-relu": {"Figure 1": "plotted only", "Theorem 1": "mathematics", "Theorem 2": "mathematics"},
    "dual-patchnorm": {"Listing": "code listing", "Figure 1": "plotted only",
                       "Figure 2": "weights drawn", "Figure 3": "plotted only"},
    "resmlp": {"Figure 1": "diagram", "Figure 2": "weights drawn", "Figure 4": "plotted only",
               "Figure B.1": "weights drawn", "Algorithm 1": "code listing"},
}
# Printed tables the CSVs hold although CATALOG.md does not list them.
EXTRA_ITEMS = {"resmlp": ("Table D.3",)}

# A printed number: optional sign / approximation mark, digits with optional thousands commas,
# optional decimals. Anything else ("crash", "-", "7/14", "{0.0, 0.1}") is a printed non-number.
_NUMBER = re.compile(r"^[+\-−~≈<>]?(\d{1,3}(,\d{3})+|\d+)(\.(\d+))?$")


@lru_cache(maxsize=None)
def _load(paper: str) -> pd.DataFrame:
    check_choice("paper", paper, PAPERS)
    with resources.files(__name__).joinpath(f"{paper}.csv").open(encoding="utf-8") as f:
        # dtype=str and no NA parsing: "-" / "0.0" / "none" must stay the printed strings
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
    if list(df.columns) != COLUMNS:
        raise ValueError(f"{paper}.csv: columns {list(df.columns)} != {COLUMNS}")
    return df


def paper_table(paper: str, item: str | None = None) -> pd.DataFrame:
    """All transcribed values of ``paper`` (a file stem of PAPERS), or of one ``item`` ("Table 3")."""
    df = _load(paper)
    if item is None:
        return df.copy()
    check_choice(f"item of {paper}", item, list(dict.fromkeys(df["item"])))
    return df[df["item"] == item].reset_index(drop=True)


def _cell(paper: str, item: str, row: str, quantity: str) -> pd.Series:
    df = paper_table(paper, item)
    check_choice(f"row of {paper} {item}", row, list(dict.fromkeys(df["row"])))
    hit = df[(df["row"] == row) & (df["quantity"] == quantity)]
    if hit.empty:
        valid = df.loc[df["row"] == row, "quantity"].tolist()
        raise ValueError(f"unknown quantity {quantity!r} for {paper} {item} {row!r}; "
                         f"valid choices: {', '.join(valid)}")
    return hit.iloc[0]


def paper_value(paper: str, item: str, row: str, quantity: str) -> str:
    """The printed string for one cell, e.g. ("resmlp", "Table 3", "ResMLP-B24|baseline", "gflops")."""
    return _cell(paper, item, row, quantity)["value"]


def paper_note(paper: str, item: str, row: str, quantity: str) -> str:
    """The transcription's note on one cell: where it is printed (the table's block, e.g. "Table 1 row
    12 (Feedforward networks)") and what was inferred."""
    return _cell(paper, item, row, quantity)["note"]


def paper_number(paper: str, item: str, row: str, quantity: str) -> float:
    """The printed cell as a number: "79.4" -> 79.4, "1,281,167" -> 1281167.0, "−0.3" -> -0.3,
    "~80" -> 80.0. A printed non-number ("crash", "-") or a bound ("<0.5") is refused."""
    value = paper_value(paper, item, row, quantity).strip()
    if _NUMBER.match(value) is None or value[0] in "<>":
        raise ValueError(f"{paper} {item} {row!r} {quantity}: the paper prints {value!r}, not a number")
    return float(value.lstrip("~≈+").replace("−", "-").replace(",", ""))


def printed_decimals(value: str) -> int:
    """Number of printed decimals: "17.60" -> 2, "82.2" -> 1, "1,281,167" -> 0, "+0.8" -> 1."""
    m = _NUMBER.match(value.strip())
    if m is None:
        raise ValueError(f"{value!r} is not a printed number")
    return len(m.group(4) or "")
