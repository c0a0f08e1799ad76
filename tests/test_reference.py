"""The transcribed tables are complete, well-formed and agree with the papers' text."""
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from vitmlp.reference import (COLUMNS, EXTRA_ITEMS, NO_PRINTED_VALUES, PAPERS, paper_table,
                              paper_value, printed_decimals)

PAPERS_DIR = Path(os.environ.get("VITMLP_PAPERS", Path(__file__).resolve().parents[2] / "shared" / "papers"))
CATALOG_MD = PAPERS_DIR.parent / "CATALOG.md"


def catalog_items() -> dict[str, list[str]]:
    """Items per paper: from CATALOG.md when it is reachable, else the packaged catalog.csv."""
    if CATALOG_MD.exists():
        items, paper = {}, None
        for line in CATALOG_MD.read_text(encoding="utf-8").splitlines():
            m = re.match(r"## (\S+)\.md", line)
            if m:
                paper = m.group(1)
                items[paper] = []
            elif paper and line.startswith("| ") and not line.startswith("| item"):
                item = line.split("|")[1].strip()
                if item and item not in items[paper]:
                    items[paper].append(item)
        return items
    from vitmlp.results import catalog
    c = catalog()
    return {p: list(dict.fromkeys(g["item"])) for p, g in c.groupby("paper", sort=False)}


@pytest.fixture(scope="module")
def text():
    if not PAPERS_DIR.exists():
        pytest.skip(f"papers not found at {PAPERS_DIR} (set VITMLP_PAPERS)")
    return {p: (PAPERS_DIR / f"{p}.md").read_text(encoding="utf-8") for p in PAPERS}


def line_with(text: str, needle: str) -> str:
    hits = [l for l in text.splitlines() if needle in l]
    assert len(hits) == 1, f"{needle!r} is on {len(hits)} lines of the paper, expected 1"
    return hits[0]


_TOKEN = re.compile(r"crash|[—–_]|\d+/\d+|[+\-]?\d[\d,]*(?:\.\d+)?")


def tokens(line: str) -> list[str]:
    """Printed cells of a table line: numbers, 'crash', dashes (all dashes -> '-')."""
    return ["-" if t in "—–_" else t.rstrip(",") for t in _TOKEN.findall(line)]


def as_token(value: str) -> str:
    return value if value == "-" else value.lstrip("+~<")


# ---------------------------------------------------------------- schema and coverage

@pytest.mark.parametrize("paper", PAPERS)
def test_schema(paper):
    df = paper_table(paper)
    assert list(df.columns) == COLUMNS
    assert len(df) > 100
    assert (df != "").all().all(), "empty cells"
    assert df["quantity"].str.fullmatch(r"[a-z][A-Za-z0-9_]*").all()
    assert df["note"].str.len().gt(3).all()
    # every spread has its mean: X_std needs X on the same (item, row)
    keys = set(zip(df["item"], df["row"], df["quantity"]))
    for item, row, q in keys:
        if q.endswith("_std"):
            assert (item, row, q[:-4]) in keys, (paper, item, row, q)


@pytest.mark.parametrize("paper", PAPERS)
def test_cells_unique(paper):
    df = paper_table(paper)
    dup = df[df.duplicated(["item", "row", "quantity"], keep=False)]
    assert dup.empty, dup


@pytest.mark.parametrize("paper", PAPERS)
def test_every_catalog_item_with_printed_numbers_is_transcribed(paper):
    catalog = catalog_items()[paper]
    have = set(paper_table(paper)["item"])
    none = set(NO_PRINTED_VALUES[paper])
    assert none <= set(catalog), none - set(catalog)
    assert not (have & none), have & none
    assert set(catalog) - none == have - set(EXTRA_ITEMS.get(paper, ())), \
        (set(catalog) - none) ^ (have - set(EXTRA_ITEMS.get(paper, ())))


def test_catalog_csv_agrees_with_catalog_md():
    if not CATALOG_MD.exists():
        pytest.skip("CATALOG.md not reachable")
    from vitmlp.results import catalog
    c = catalog()
    md = catalog_items()
    assert {p: list(dict.fromkeys(g["item"])) for p, g in c.groupby("paper", sort=False)} == md


# ---------------------------------------------------------------- against the paper text

@pytest.mark.parametrize("paper", PAPERS)
def test_every_value_is_printed_in_the_paper(paper, text):
    """A typo in a transcribed value (almost always) produces a number the paper never prints."""
    body = text[paper].replace("\\", "")  # LaTeX sets: $\{0.0, 0.1\}$
    missing = []
    for r in paper_table(paper).itertuples():
        if r.value == "-" or "INFERRED" in r.note:
            continue
        v = r.value.lstrip("+-~<")
        try:
            printed_decimals(r.value)
            found = re.search(r"(?<![\d.])" + re.escape(v) + r"(?![\d])", body)
        except ValueError:
            found = v in body
        if not found:
            missing.append((r.item, r.row, r.quantity, r.value))
    assert not missing


# tables whose rows are lines of the text: a row's cells, in CSV order, are a run of that line's
# cells. "ordered" = in order but other numbers in between (variant text such as "3x3").
ROW_LINES = {
    "three-things-vit": {"Table 1": "run", "Table 2": "run", "Table 3": "run", "Table 4": "run",
                         "Table 6": "run", "Table 7": "run", "Table 9": "run"},
    "mlp-mixer": {"Table 2": "run", "Table 3": "run", "Table 4": "run"},
    "scaled-relu": {"Table 1": "run", "Table 2": "run", "Table 3": "run", "Table 4": "run",
                    "Table 5": "run", "Table 6": "run", "Table 7": "run"},
    "dual-patchnorm": {"Table 1": "run", "Table 2": "run", "Table 3": "run", "Table 4": "run"},
    "resmlp": {"Table 1": "ordered", "Table 3": "ordered", "Table 4": "run",
               "Table D.1": "run", "Table D.3": "run"},
}


def _on_one_line(seq, lines, mode):
    for t in lines:
        if mode == "run":
            if any(t[i:i + len(seq)] == seq for i in range(len(t) - len(seq) + 1)):
                return True
        else:
            it = iter(t)
            if all(any(x == s for x in it) for s in seq):
                return True
    return False


@pytest.mark.parametrize("paper", PAPERS)
def test_rows_sit_on_one_line_of_the_paper(paper, text):
    lines = [tokens(l) for l in text[paper].splitlines()]
    bad = []
    for item, mode in ROW_LINES[paper].items():
        df = paper_table(paper, item)
        # only cells sourced from a table row; signs rebuilt from arrows are not printed
        df = df[df["note"].str.match(re.escape(item) + r"( left| right)? row \d+")
                & ~df["note"].str.contains("INFERRED|sign from the arrow")]
        assert len(df) > 5, item
        for row, g in df.groupby("row", sort=False):
            seq = [as_token(v) for v in g["value"]]
            if len(seq) > 1 and set(seq) == {"crash"}:
                seq = ["crash"]
            if not _on_one_line(seq, lines, mode):
                bad.append((item, row, seq))
    assert not bad


@pytest.mark.parametrize("paper,item,label,models,quantities", [
    ("mlp-mixer", "Table 1", None, ["S/32", "S/16", "B/32", "B/16", "L/32", "L/16", "H/14"],
     ["depth", "patch", "width", "seq_len", "mlp_dim_channels", "mlp_dim_tokens", "params_M"]),
    ("resmlp", "Table 2", None, ["ResNet-50", "ViT-S/16", "ViT-S/8", "ViT-B/16", "ResMLP-S12", "ResMLP-S24"],
     ["params_M", "gflops", "top1_linear", "top1_knn"]),
    ("resmlp", "Table 5", None, ["GNMT", "ConvS2S", "Transf. (base)", "ResMLP-6", "ResMLP-12"],
     ["bleu_en_de", "bleu_en_fr"]),
])
def test_transposed_tables_columns(paper, item, label, models, quantities, text):
    """Tables printed with models as columns: each quantity is one line, models in order."""
    lines = [tokens(l) for l in text[paper].splitlines()]
    for q in quantities:
        seq = [as_token(paper_value(paper, item, m, q)) for m in models]
        assert _on_one_line(seq, lines, "run"), (item, q, seq)


def test_three_things_table5_lines(text):
    """Table 5 prints val (AdamW full/attn/ffn, SGD full/attn/ffn) then V2 on one line per model."""
    combos = [f"{o}|{p}" for o in ("AdamW", "SGD") for p in ("full", "attn", "ffn")]
    for model in ("ViT-S", "ViT-B", "ViT-L"):
        want = [paper_value("three-things-vit", "Table 5", f"{model}|{c}", q)
                for q in ("top1_val", "top1_v2") for c in combos]
        line = line_with(text["three-things-vit"], f"{model}\t8")
        assert tokens(line) == want


def test_three_things_table8_lines(text):
    """Table 8: epochs then ViT-Ti, -S, -B, -L on the procedure's line."""
    df = paper_table("three-things-vit", "Table 8")
    lines = [tokens(l) for l in text["three-things-vit"].splitlines()]
    for proc in df.loc[df["quantity"] == "epochs", "row"]:
        seq = [paper_value("three-things-vit", "Table 8", proc, "epochs")]
        for m in ("ViT-Ti", "ViT-S", "ViT-B", "ViT-L"):
            seq.append(paper_value("three-things-vit", "Table 8", f"{proc}|{m}", "top1_val"))
            if proc == "Our baseline" and m == "ViT-B":  # 82.2 ± 0.06
                seq.append(paper_value("three-things-vit", "Table 8", f"{proc}|{m}", "top1_val_std"))
        assert _on_one_line(seq, lines, "run"), (proc, seq)


def test_resmlp_table1_merged_convnet_line(text):
    """The six convnet rows of ResMLP Table 1 are one line: each column lists the six models."""
    models = ["EfficientNet-B3", "EfficientNet-B4", "EfficientNet-B5", "RegNetY-4GF", "RegNetY-8GF", "RegNetY-16GF"]
    line = line_with(text["resmlp"], "Convolutional networks\t")
    cells = tokens(line.split("RegNetY-16GF [47]")[1])
    want = [paper_value("resmlp", "Table 1", m, q) for q in
            ("params_M", "throughput_ims", "gflops", "peak_mem_MB", "top1_val") for m in models]
    assert cells == want


@pytest.mark.parametrize("label,row", [
    ("GeLU (baseline)\t", "activation=GeLU (baseline)"), ("SILU\t", "activation=SILU"),
    ("Hard Swish\t", "activation=Hard Swish"), ("ReLU\t", "activation=ReLU"),
    ("Layernorm (baseline)\t", "pre-normalization=Layernorm (baseline)"),
    ("Batch-Norm\t", "pre-normalization=Batch-Norm"), ("no norm (Aff)\t", "pre-normalization=no norm (Aff)"),
])
def test_resmlp_appendix_a_small_tables(label, row, text):
    df = paper_table("resmlp", "Appendix A")
    value = df.loc[df["row"] == row, "value"].item()
    line = line_with(text["resmlp"], label)
    assert tokens(line[len(label):]) == [value]


def test_resmlp_appendix_a_expansion_table(text):
    label = "Imnet-val top-1 acc."
    line = line_with(text["resmlp"], label)
    want = [paper_value("resmlp", "Appendix A", f"expansion factor=×{e}", "top1_val")
            for e in ("0.25", "0.5", "1", "2", "3", "4")]
    assert tokens(line[len(label):]) == want


# a dozen and more cells checked by hand: the needle picks one line of the paper (a row label,
# never the checked value), col is the index among the cells printed after the needle
SPOT = [  # paper, item, row, quantity, needle, col
    ("three-things-vit", "Table 1", "ViT-B/16", "gflops", "ViT-B/16\t", 4),
    ("three-things-vit", "Table 1", "ViT-L/16", "throughput_ims", "ViT-L/16\t", 5),
    ("three-things-vit", "Table 3", "S24x2", "peak_mem_MB", "S24x2\t", 2),
    ("three-things-vit", "Table 3", "B12x1", "top1_v2_std", "B12x1\t", 6),
    ("three-things-vit", "Table 7", "hMLP|BN|GELU", "gflops", "hMLP (ours)", 0),
    ("three-things-vit", "Table 7", "Linear: ViT-B13|-|-", "top1_beit_ft", "Linear: ViT-B13", 6),
    ("three-things-vit", "Table 9", "iNaturalist 2018", "train_size", "iNaturalist 2018 [28]", 0),
    ("three-things-vit", "Table 4", "ViT-B18x2|batch=4", "gain_pct", "4\t168\t", 6),
    ("mlp-mixer", "Table 1", "L/16", "params_M", "Parameters (M)", 5),
    ("mlp-mixer", "Table 1", "H/14", "mlp_dim_tokens", "MLP dimension D_S", 6),
    ("mlp-mixer", "Table 2", "JFT-300M|Mixer-H/14", "vtab19", "Mixer-H/14\t87.94", 2),
    ("mlp-mixer", "Table 3", "JFT-300M|Mixer-H/14|res=224|ep=14", "top1_val", "Mixer-H/14\t224", 1),
    ("mlp-mixer", "Table 4", "Mixer-L|ImNet-21k", "randaug_magnitude", "Mixer-L\tImNet-21k", 3),
    ("scaled-relu", "Table 2", "VOLO-d1-224|lr=1.6e-3|AdamW|wm=20|3Conv+3BN+3ReLU+1Proj|stride=(2,1,1,4)",
     "top1_val", "VOLO-d1-224\t1.6e-3", -1),
    ("scaled-relu", "Table 7", "DeiT-Small_p|lr=1e-4|SAM|data=90%", "top1_val", "SAM\t90%", 0),
    ("scaled-relu", "text", "DeiT-Small|conv-stem|epoch=20", "top1_val", "18.1 vs 10.6", 1),
    ("dual-patchnorm", "Table 3", "L/16|1.1M|base", "zeroshot_top1", "L/16\t1.1M\t", 0),
    ("dual-patchnorm", "Table 4", "RMSNorm|Ti/16", "delta_top1_val", "RMSNorm\t", 4),
    ("dual-patchnorm", "Table 1", "IN21k|930K|S/32|DPN", "acc_25shot", "S/32\t63.8", 1),
    ("resmlp", "Table 1", "DeiT-B", "peak_mem_MB", "DeiT-B [56]", 3),
    ("resmlp", "Table 3", "ResMLP-B24/8|distillation", "top1_val", "100.2\tdistillation", 0),
    ("resmlp", "Table 5", "ResMLP-12", "bleu_en_fr", "En-Fr\t", 4),
    ("resmlp", "Table D.3", "ResMLP-S36|distillation|class-MLP", "top1_v2", "36\t47.1\t8.9\tdistillation\tclass-MLP", -1),
    ("resmlp", "Appendix A", "expansion factor=×2", "top1_val", "Imnet-val top-1 acc.", 3),
    ("resmlp", "Table D.1", "Batch size 256", "top1_val", "Batch size 256", 0),
]


@pytest.mark.parametrize("paper,item,row,quantity,needle,col", SPOT)
def test_spot_values_against_paper_line(paper, item, row, quantity, needle, col, text):
    line = line_with(text[paper], needle)
    cells = tokens(line[line.index(needle) + len(needle):])
    value = paper_value(paper, item, row, quantity)
    assert cells[col] == as_token(value), (cells, value)


# ---------------------------------------------------------------- equalities the papers print

def test_three_things_table4_gain_is_best_over_seq():
    df = paper_table("three-things-vit", "Table 4")
    for row in dict.fromkeys(df["row"]):
        v = lambda q: float(paper_value("three-things-vit", "Table 4", row, q))
        assert v("throughput_best_ims") == max(v("throughput_seq_ims"), v("throughput_par_ims"))
        gain = v("throughput_best_ims") / v("throughput_seq_ims") - 1
        assert abs(100 * gain - v("gain_pct")) < 1.0, row


def test_dpn_quoted_average_gains_follow_from_rows():
    v = lambda item, row: float(paper_value("dual-patchnorm", item, row, "acc_25shot"))
    archs = ["Ti/16", "S/32", "B/32", "S/16", "B/16"]
    gain21k = sum(v("Table 1", f"IN21k|93K|{a}|DPN") - v("Table 1", f"IN21k|93K|{a}|base") for a in archs) / 5
    assert round(gain21k, 1) == float(paper_value("dual-patchnorm", "Table 1", "IN21k|93K|average", "dpn_gain_acc_25shot"))
    gainjft = sum(v("Table 2", f"JFT|220K|{a}|DPN") - v("Table 2", f"JFT|220K|{a}|base") for a in ["B/32", "B/16", "L/16"]) / 3
    assert round(gainjft, 1) == float(paper_value("dual-patchnorm", "Table 2", "JFT|220K|average", "dpn_gain_acc_25shot"))


def test_resmlp_cross_table_consistency():
    # Table D.2 at 400 epochs (the default) is Table D.3's 36-layer regular/average row
    for q in ("top1_val", "top1_real", "top1_v2"):
        assert paper_value("resmlp", "Table D.2", "ResMLP-S36|epochs=400", q) == \
            paper_value("resmlp", "Table D.3", "ResMLP-S36|regular|average", q)
    # the inferred Table 1 params are Table 3's, rounded
    for t1, t3 in (("ResMLP-S12", "ResMLP-S12|baseline"), ("ResMLP-B24", "ResMLP-B24|baseline")):
        assert int(paper_value("resmlp", "Table 1", t1, "params_M")) == \
            round(float(paper_value("resmlp", "Table 3", t3, "params_M")))


def test_three_things_table1_and_table3_agree_on_vit_b():
    for q in ("params_M", "gflops"):
        assert paper_value("three-things-vit", "Table 1", "ViT-B/16", q) == \
            paper_value("three-things-vit", "Table 3", "B12x1", q)


# ---------------------------------------------------------------- API

def test_precision_is_kept():
    assert paper_value("three-things-vit", "Table 7", "Linear: ViT-B12|-|-", "top1_val") == "82.20"
    assert paper_value("mlp-mixer", "Table 2", "ImageNet-21k|HaloNet", "tpuv3_core_days_k") == "0.10"
    assert paper_value("dual-patchnorm", "Table 1", "IN21k|930K|S/32|base", "acc_25shot_std") == "0.00"
    assert paper_value("scaled-relu", "Table 1", "patchify-stem|lr=1e-3|AdamW|wm=5", "top1_val") == "crash"
    assert paper_table("mlp-mixer", "Table 4")["value"].map(type).eq(str).all()


@pytest.mark.parametrize("value,decimals", [("17.60", 2), ("82.2", 1), ("3796", 0), ("1,281,167", 0),
                                            ("+0.8", 1), ("-2.6", 1), ("~45", 0), ("0.10", 2)])
def test_printed_decimals(value, decimals):
    assert printed_decimals(value) == decimals


@pytest.mark.parametrize("value", ["crash", "-", "7/14", "{0.0, 0.1}", "", "1.2.3"])
def test_printed_decimals_refuses_non_numbers(value):
    with pytest.raises(ValueError, match="not a printed number"):
        printed_decimals(value)


def test_unknown_paper_refused_with_choices():
    with pytest.raises(ValueError, match="valid choices: three-things-vit, mlp-mixer, scaled-relu"):
        paper_table("vit")


def test_unknown_item_refused_with_choices():
    with pytest.raises(ValueError, match=r"unknown item of resmlp 'Table 9'.*Table D\.1"):
        paper_table("resmlp", "Table 9")
    with pytest.raises(ValueError) as err:  # plotted only: not a valid choice
        paper_table("three-things-vit", "Figure 1")
    choices = str(err.value).split("valid choices:")[1]
    assert "Table 9" in choices and "Figure 1" not in choices


def test_unknown_row_or_quantity_refused_with_choices():
    with pytest.raises(ValueError, match="S24x2"):
        paper_value("three-things-vit", "Table 3", "S24x3", "params_M")
    with pytest.raises(ValueError, match="peak_mem_MB"):
        paper_value("three-things-vit", "Table 3", "S24x2", "params")


def test_paper_number_reads_printed_numbers_and_refuses_the_rest():
    from vitmlp.reference import paper_number
    assert paper_number("three-things-vit", "Table 9", "ImageNet", "train_size") == 1281167.0
    assert paper_number("three-things-vit", "Table 3", "S24x2", "params_M") == 85.9
    with pytest.raises(ValueError, match="prints 'crash', not a number"):
        paper_number("scaled-relu", "Table 1", "patchify-stem|lr=1e-3|AdamW|wm=5", "top1_val")
    with pytest.raises(ValueError, match="prints '<0.5', not a number"):
        paper_number("scaled-relu", "Table 6", "two-stage training|large labelled data (Newell and Deng 2020)",
                     "delta_top1_val")


def test_paper_note_is_the_note_of_the_one_cell_asked_for():
    from vitmlp.reference import paper_note
    # ResMLP-S12's params cell carries an inference its other cells do not
    assert "INFERRED" in paper_note("resmlp", "Table 1", "ResMLP-S12", "params_M")
    assert paper_note("resmlp", "Table 1", "ResMLP-S12", "top1_val") == \
        "Table 1 row 12 (Feedforward networks); throughput on one V100-32GB, batch 32"
    with pytest.raises(ValueError, match="peak_mem_MB"):
        paper_note("resmlp", "Table 1", "ResMLP-S12", "params")
