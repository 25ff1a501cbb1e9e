"""Regenerate the screenshots of the reading page in docs/img/ (docs/runs-and-reports.md shows them).

    .venv/bin/python docs/make_screenshots.py [--out docs/img] [--run RUN_DIR]

It runs a small comparison offline — `rag` with BM25 retrieval against `rag` with mem0 on four
cases of the bundled sample suite, judged by PQR, on the scripted model (about a minute; `--run`
reuses a folder such a run wrote) — writes its view, and photographs them in headless Chromium
(Debian's `chromium` and `chromium-driver`, driven by selenium) at 1400 px: the summary, a case
with its judges' reasoning open, a citation's source text, the diff against the baseline, and an
episode's grouped memory-ingest calls. Each image is palette-quantized (a few dozen KB).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1400
RECIPE = {
    "name": "reading-page",
    "description": "rag with BM25 retrieval vs rag with mem0 on four sample cases, judged by PQR",
    "benchmark": {"name": "sample", "split": "all", "setting": "context", "limit": 4},
    "models": {"system": {"model": "scripted"}, "judge": {"model": "scripted"}},
    "judges": [{"name": "pqr"}],
    "systems": [
        {"name": "rag-bm25", "pipeline": "rag", "memory": {"backend": "retrieval", "method": "bm25", "k": 5}},
        {"name": "rag-mem0", "pipeline": "rag", "memory": {"backend": "mem0"}},
    ],
}
SHOTS = ("report-summary.png", "report-case.png", "report-citation.png", "report-diff.png", "view-grouped-calls.png")


def run_comparison(folder: Path) -> Path:
    from atelier.runs.execution.runner import run_recipe
    from atelier.runs.folder.recipe import parse_recipe

    recipe = parse_recipe({**RECIPE, "run": {"out_dir": str(folder.parent)}})
    return run_recipe(recipe, folder, progress=False).path


def browser(height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={WIDTH},{height}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=options)


def save(png: bytes, path: Path) -> Path:
    """The screenshot as a palette PNG: the pages are flat colours, 256 of them lose nothing visible."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    image.save(path, optimize=True)
    return path


def photograph(run_dir: Path, out: Path) -> list[Path]:
    from selenium.webdriver.common.by import By

    from atelier.runs.reading.view import write_static

    write_static(run_dir, run_dir / "view")
    out.mkdir(parents=True, exist_ok=True)
    driver = browser()
    shots = []
    try:
        driver.get((run_dir / "report.html").resolve().as_uri())
        shots.append(save(driver.get_screenshot_as_png(), out / SHOTS[0]))
        # a case with its judges' reasoning open: the first case whose systems both answered
        case = driver.find_element(By.CSS_SELECTOR, "section.case")
        driver.execute_script(
            "arguments[0].querySelectorAll('details.judgment').forEach(d => d.open = true);"
            "arguments[0].scrollIntoView();",
            case,
        )
        driver.set_window_size(WIDTH, min(2400, case.size["height"] + 80))
        shots.append(save(case.screenshot_as_png, out / SHOTS[1]))
        driver.set_window_size(WIDTH, 1000)
        # a citation's source text, as a click on its marker shows it
        cite = driver.find_element(By.CSS_SELECTOR, ".response button.cite[data-source]")
        driver.execute_script(
            "window.scrollTo(0, arguments[0].getBoundingClientRect().top + window.scrollY - 300)", cite
        )
        cite.click()
        time.sleep(0.2)
        shots.append(save(driver.get_screenshot_as_png(), out / SHOTS[2]))
        driver.find_element(By.TAG_NAME, "body").send_keys("\ue00c")  # Esc closes it
        # the diff of the first case against the baseline: `j` selects it, `d` opens its diff
        driver.execute_script("window.scrollTo(0, 0)")
        body = driver.find_element(By.TAG_NAME, "body")
        body.send_keys("j")
        body.send_keys("d")
        diff = driver.find_element(By.CSS_SELECTOR, "section.case.current .diffs")
        shots.append(save(diff.screenshot_as_png, out / SHOTS[3]))
        # an episode of mem0: its ingest's calls as one row
        page = next((run_dir / "view" / "episodes").glob("*rag-mem0*.html"))
        driver.get(page.resolve().as_uri())
        group = driver.find_element(By.CSS_SELECTOR, "details.call-group")
        driver.execute_script("arguments[0].closest('.step-card').scrollIntoView()", group)
        shots.append(
            save(
                group.find_element(By.XPATH, "./ancestor::div[contains(@class, 'step-card')]").screenshot_as_png,
                out / SHOTS[4],
            )
        )
    finally:
        driver.quit()
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--run", type=Path, help="a run folder of RECIPE already written (skips the run)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="atelier-shots-") as scratch:
        if args.run is None:
            os.environ.setdefault("ATELIER_CACHE_DIR", str(Path(scratch) / "cache"))
            run_dir = run_comparison(Path(scratch) / "reading-page")
        else:
            run_dir = args.run
        for path in photograph(run_dir, args.out):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
