"""Copy the images the docs show from a finished run into docs/img/, where they are
committed (a link into results/ is a broken image in any clone that has not run).

    python tools/docs_images.py              # from ./results/ (a finished `snakemake --cores 2`)
    python tools/docs_images.py --run DIR    # from DIR/results/

:data:`FIGURES` are copied from ``results/figures/``; :data:`SCREENSHOTS` are taken of the
run's ``results/browse/index.html`` with headless Chromium through Playwright, and are left
as they are, with one line saying so, where either is missing. tests/test_docs.py checks
that every image the docs link is committed.
"""

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "img"
#: docs/img/ name: the run's figure it is a copy of.
FIGURES = {"frontier.png": "results/figures/frontier.png"}
#: docs/img/ name: (the page's view, as its address says it), window size.
SCREENSHOTS = {"browse_compare.png": ("view=compare", (1280, 900))}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


def copy_figures(run, images=IMAGES):
    """Copy :data:`FIGURES` from ``run``; return the names copied. A missing one stops."""
    missing = [source for source in FIGURES.values() if not (run / source).is_file()]
    if missing:
        raise SystemExit(f"docs_images: {run}: no {', '.join(missing)}; finish the run first (snakemake --cores 2)")
    images.mkdir(parents=True, exist_ok=True)
    for name, source in FIGURES.items():
        shutil.copyfile(run / source, images / name)
    return list(FIGURES)


def take_screenshots(run, images=IMAGES):
    """Screenshot the run's browser for :data:`SCREENSHOTS`; return the names written
    (none, with a line on stderr, without Playwright, Chromium or the page)."""
    page_file = run / "results" / "browse" / "index.html"
    chromium = os.environ.get("NDIR_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is None or not page_file.is_file() or not os.access(chromium, os.X_OK):
        print(
            f"docs_images: {', '.join(SCREENSHOTS)} kept as they are (needs Playwright, Chromium and {page_file})",
            file=sys.stderr,
        )
        return []
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    written = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            for name, (view, (width, height)) in SCREENSHOTS.items():
                page = browser.new_page(viewport={"width": width, "height": height})
                page.goto(f"{page_file.resolve().as_uri()}#{view}")
                page.wait_for_load_state("load")
                page.screenshot(path=str(images / name))
                page.close()
                written.append(name)
        finally:
            browser.close()
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ROOT, help="the folder holding the run's results/")
    args = parser.parse_args(argv)
    written = copy_figures(args.run) + take_screenshots(args.run)
    for name in written:
        print(f"docs/img/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
