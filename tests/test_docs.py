"""The README and the pages of docs/: relative links resolve, the README stays short.

A link is Markdown's ``[text](target)`` or ``![alt](target)``; links to other sites
(http, https, mailto) and to anchors of the same page (``#...``) are not checked, and
a ``#fragment`` is cut off the target before it is looked up. Fenced code blocks and
inline code are skipped, so code that looks like a link is not taken for one.
"""

import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 250
# The pages the README must link, one topic each.
REQUIRED_PAGES = ["results", "performance", "cluster", "data", "method", "testing"]

# Files under results/ are written by a run of the workflow (`snakemake --cores 2`),
# never committed: a link there (e.g. results/figures/fig4.png) is allowed without the
# file existing. Nothing else is exempt.
PRODUCED_BY_THE_RUN = ("results/",)

FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1\s*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)


def markdown_files():
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def links(text):
    """Targets of the Markdown links and images of ``text``, outside code."""
    text = FENCE.sub("", text)
    text = INLINE_CODE.sub("", text)
    return LINK.findall(text)


def broken_links(path):
    """The relative links of ``path`` that point to nothing in the repository."""
    broken = []
    for target in links(path.read_text(encoding="utf-8")):
        if EXTERNAL.match(target) or target.startswith("#"):
            continue
        file_part = target.split("#", 1)[0]
        resolved = (path.parent / file_part).resolve()
        try:
            relative = resolved.relative_to(ROOT).as_posix()
        except ValueError:
            broken.append(f"{target} (outside the repository)")
            continue
        if resolved.exists():
            continue
        if relative.startswith(PRODUCED_BY_THE_RUN):
            continue
        broken.append(target)
    return broken


def test_link_pattern_finds_links_and_images_not_code():
    text = (
        "See [the data](docs/data.md#the-split) and ![fig](results/figures/fig4.png).\n"
        "`[not](a-link.md)` and [site](https://example.org)\n"
        "```\n[also not](inside-a-fence.md)\n```\n"
    )
    assert links(text) == ["docs/data.md#the-split", "results/figures/fig4.png", "https://example.org"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    assert broken_links(path) == [], f"{path.relative_to(ROOT)}: broken links"


def test_readme_is_short():
    n_lines = len(README.read_text(encoding="utf-8").splitlines())
    assert n_lines <= MAX_README_LINES, f"README.md has {n_lines} lines, more than {MAX_README_LINES}"


@pytest.mark.parametrize("page", REQUIRED_PAGES)
def test_readme_links_each_docs_page(page):
    assert (ROOT / "docs" / f"{page}.md").is_file(), f"docs/{page}.md is missing"
    targets = {target.split("#", 1)[0] for target in links(README.read_text(encoding="utf-8"))}
    assert f"docs/{page}.md" in targets, f"README.md does not link docs/{page}.md"


def test_the_readme_quotes_the_stored_reference_run():
    """Tables I-II and the readings in the README are docs/reference_run's, as
    tools/reference_readme.py writes them: a hand edit or a stale block fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reference_readme", ROOT / "tools" / "reference_readme.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--check"]) == 0, (
        "README.md or docs/results.md disagrees with docs/reference_run: run tools/reference_readme.py"
    )
    block = README.read_text(encoding="utf-8").split(tool.BEGIN)[1].split(tool.END)[0]
    readings = pd.read_csv(ROOT / "docs" / "reference_run" / "readings.csv")
    for verdict in readings["Verdict"].dropna():
        assert f"| {verdict} " in block
