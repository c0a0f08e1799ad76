"""Issue 13: src stays readable as chapters are added: no function over 60 lines."""
import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "vitmlp"
MAX_LINES = 60


def test_no_function_in_src_is_over_60_lines():
    long = [f"{p.relative_to(SRC)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in sorted(SRC.rglob("*.py")) for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > MAX_LINES]
    assert not long, "split these: " + "; ".join(long)
