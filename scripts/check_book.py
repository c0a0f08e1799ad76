"""Open every page of the built book in headless Chromium, as a reader would, and fail on what a
reader would see as broken: a link to a missing page, an image that does not load, a console error
caused by our content, stderr or progress-bar text, a table/figure wider than the content column,
and a saved figure whose smallest text shows below 9 pt (its sidecar's ``text_pt``).

    python scripts/check_book.py book/_build/html [--shots DIR]    # make check-book

Needs Debian's ``chromium`` and ``chromium-driver`` (apt) and selenium (requirements.lock).
Nothing outside the book is loaded: links to other sites are not followed.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

STDERR = re.compile(r"\b[A-Z]\w*Warning: |Traceback \(most recent call last\)|\d+%\|[^\n]*\||\bit/s\]")
SKIP = {"genindex.html", "search.html"}
# Errors of Jupyter Book 1's theme on every page, whatever the content (sphinx-thebe declares its
# URL twice; the theme's mode switch starts empty on file:// pages): not ours, so not counted.
THEME_ERRORS = ("Identifier 'THEBE_JS_URL' has already been declared", "Got invalid theme mode")
WIDTH = 1400

# In the page: elements of the content column that stick out of it (and are not inside a box that
# scrolls them), images that did not load, and every link target.
PROBE = """
const art = document.querySelector('.bd-article') || document.querySelector('article') || document.body;
const limit = art.getBoundingClientRect().right + 2;
const wide = [];
for (const el of art.querySelectorAll('table, img, pre, svg, .cell_output')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.right <= limit) continue;
  let a = el.parentElement, held = false;
  while (a && a !== document.body) {
    const s = getComputedStyle(a);
    if (['auto', 'scroll', 'hidden'].includes(s.overflowX) && a.getBoundingClientRect().right <= limit) { held = true; break; }
    a = a.parentElement;
  }
  if (!held) wide.push(el.tagName.toLowerCase() + ' ' + Math.round(r.right - limit) + ' px too wide');
}
const broken = Array.from(document.images).filter(i => i.complete && i.naturalWidth === 0).map(i => i.getAttribute('src'));
const links = Array.from(document.querySelectorAll('a[href]')).map(a => a.href);
return {wide, broken, links, text: art.innerText};
"""


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        raise RuntimeError("needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={WIDTH},1000", "--allow-file-access-from-files"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def _probe(drv, tries: int = 3):
    """The probe's findings, or the error text when the page never rendered (a retry covers a
    page still being laid out right after load)."""
    from selenium.common.exceptions import JavascriptException
    for _ in range(tries):
        try:
            return drv.execute_script(PROBE)
        except JavascriptException as e:
            err = str(e).splitlines()[0][:150]
            time.sleep(1)
    return err


def check(html: Path, shots: Path | None = None) -> list[str]:
    """Problems found on the pages under ``html`` (the built book), as 'page: problem' lines."""
    html = Path(html).resolve()
    pages = sorted(p for p in html.rglob("*.html") if p.name not in SKIP and "_sources" not in p.parts
                   and "_static" not in p.parts)
    if not pages:
        raise RuntimeError(f"no pages under {html}: build the book first (make book)")
    problems = []
    drv = browser()
    try:
        for page in pages:
            rel = page.relative_to(html)
            drv.get(page.as_uri())
            got = _probe(drv)
            if isinstance(got, str):
                problems.append(f"{rel}: page did not render ({got})")
                continue
            problems += [f"{rel}: {w}" for w in got["wide"]]
            problems += [f"{rel}: image does not load: {src}" for src in got["broken"]]
            for href in got["links"]:
                u = urlparse(href)
                if u.scheme == "file" and not Path(unquote(u.path)).exists():
                    problems.append(f"{rel}: broken link to {Path(unquote(u.path)).relative_to(html.parent)}")
            m = STDERR.search(got["text"])
            if m:
                problems.append(f"{rel}: stderr or progress text on the page: {m.group(0)!r}")
            for entry in drv.get_log("browser"):
                msg = entry["message"]
                # other sites cannot be reached from a build machine; only errors of our own files count
                if entry["level"] == "SEVERE" and "file://" in msg and not any(t in msg for t in THEME_ERRORS):
                    problems.append(f"{rel}: console error: {msg[:200]}")
            if shots and rel.as_posix() in ("ledger.html", "resmlp/table3_ablations.html"):
                shots.mkdir(parents=True, exist_ok=True)
                height = drv.execute_script("return document.body.scrollHeight")
                drv.set_window_size(WIDTH, min(height, 2400))
                drv.save_screenshot(str(shots / (rel.as_posix().replace("/", "_").replace(".html", ".png"))))
                drv.set_window_size(WIDTH, 1000)
    finally:
        drv.quit()
    print(f"{len(pages)} pages opened in Chromium at {WIDTH} px: {len(problems)} problems")
    return problems


def figure_text(results: Path) -> list[str]:
    """Problems with saved figures' text size as the page shows it; prints how many were drawn
    before the rule (no ``text_pt``: they change when their notebook re-runs)."""
    sides = [(p, json.loads(p.read_text())) for p in sorted(Path(results).rglob("*.json")) if "runs" not in p.parts]
    figs = [{**s, "path": p} for p, s in sides
            if isinstance(s, dict) and any(str(f).endswith(".png") for f in s.get("files", []))]
    from vitmlp.plots import MIN_PT   # the rule plots.legible applies
    small = [f"{s['path'].relative_to(results)}: smallest text shows at {s['text_pt']} pt (< {MIN_PT:g})"
             for s in figs if "text_pt" in s and s["text_pt"] < MIN_PT - 0.05]   # text_pt is rounded to 0.1
    print(f"{len(figs)} saved figures: {sum('text_pt' in s for s in figs)} measured at the legibility rule, "
          f"{len(small)} below {MIN_PT:g} pt, {sum('text_pt' not in s for s in figs)} drawn before the rule")
    return small


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html", nargs="?", default="book/_build/html")
    ap.add_argument("--shots", type=Path, help="save screenshots of the ledger and a notebook page here")
    args = ap.parse_args(argv)
    problems = check(args.html, args.shots) + figure_text(Path(args.html).resolve().parents[2] / "results")
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
