"""The README and the pages of docs/: relative links resolve, images are committed, the
README stays short, the licence and the citation file agree with pyproject.toml.

A link is Markdown's ``[text](target)`` or ``![alt](target)``; links to other sites
(http, https, mailto) and to anchors of the same page (``#...``) are not checked, and
a ``#fragment`` is cut off the target before it is looked up. Fenced code blocks and
inline code are skipped, so code that looks like a link is not taken for one.
"""

import importlib.util
import re
import subprocess
import tomllib
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 150
# The pages the README must link, one topic each.
REQUIRED_PAGES = ["results", "performance", "cluster", "data", "method", "testing"]

# Files under results/ are written by a run of the workflow (`snakemake --cores 2`),
# never committed: a link there (e.g. results/figures/fig4.png) is allowed without the
# file existing. Nothing else is exempt.
PRODUCED_BY_THE_RUN = ("results/",)

FENCE = re.compile(r"^\s*(```|~~~).*?^\s*\1\s*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
IMAGE = re.compile(r"!\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?")
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


def tool(name):
    """The module ``tools/<name>.py``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_results_page_quotes_the_stored_reference_run():
    """Tables I-II and the readings in docs/results.md are docs/reference_run's, as
    tools/reference_run.py writes them: a hand edit or a stale block fails here."""
    reference = tool("reference_run")
    stale = "docs/results.md disagrees with docs/reference_run: run tools/reference_run.py"
    assert reference.main(["--check"]) == 0, stale
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    block = page.split(reference.BEGIN)[1].split(reference.END)[0]
    readings = pd.read_csv(ROOT / "docs" / "reference_run" / "readings.csv")
    for verdict in readings["Verdict"].dropna():
        assert f"| {verdict} " in block


def test_the_readme_quotes_the_reference_runs_time_and_largest_job():
    """The README's wall time, commit and largest job are the documented run's
    (docs/reference_run/run.json and run_info.json), as tools/reference_run.py reads them."""
    readme = " ".join(README.read_text(encoding="utf-8").split())
    for figure in tool("reference_run").readme_figures():
        assert figure in readme, f"README.md does not say {figure!r} of docs/reference_run"


def test_the_readme_copies_no_table_of_results():
    """The README links docs/results.md for the figures; it holds no copy of them."""
    readme = README.read_text(encoding="utf-8")
    assert tool("reference_run").BEGIN not in readme
    assert not re.search(r"^\|.*\|\s*$", readme, flags=re.MULTILINE), "README.md has a table"


def committed_files():
    """The repository's tracked files (relative, posix), or None outside a git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return set(listed.stdout.splitlines())


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_images_shown_are_committed_under_docs_img(path):
    """An image the README or docs show is a committed file of docs/img/, never one a run
    writes under results/ (a broken image in every clone that has not run)."""
    text = INLINE_CODE.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    committed = committed_files()
    for target in IMAGE.findall(text):
        if EXTERNAL.match(target):
            continue
        relative = (path.parent / target).resolve().relative_to(ROOT).as_posix()
        assert relative.startswith("docs/img/"), f"{path.name}: {target} is not under docs/img/"
        assert (ROOT / relative).is_file(), f"{path.name}: {target} is missing"
        if committed is not None:
            assert relative in committed, f"{path.name}: {target} is not committed (git add it)"


def test_every_docs_image_is_regenerated_by_the_tool():
    """Each file of docs/img/ is one that tools/docs_images.py writes from a finished run."""
    images = tool("docs_images")
    made = set(images.FIGURES) | set(images.SCREENSHOTS)
    assert {p.name for p in (ROOT / "docs" / "img").iterdir()} == made
    assert all(source.startswith("results/figures/") for source in images.FIGURES.values())


def test_docs_images_copies_the_named_figures(tmp_path):
    images = tool("docs_images")
    run, out = tmp_path / "run", tmp_path / "img"
    for source in images.FIGURES.values():
        (run / source).parent.mkdir(parents=True, exist_ok=True)
        (run / source).write_bytes(b"png " + source.encode())
    assert images.copy_figures(run, out) == list(images.FIGURES)
    for name, source in images.FIGURES.items():
        assert (out / name).read_bytes() == b"png " + source.encode()
    with pytest.raises(SystemExit, match="finish the run first"):
        images.copy_figures(tmp_path / "no-run", out)


def test_licence_and_citation_agree_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "authors", "version", "license", "preferred-citation"):
        assert citation.get(key), f"CITATION.cff has no {key}"
    assert citation["cff-version"] == "1.2.0"
    assert citation["license"] == project["license"] and citation["version"] == project["version"]
    paper = citation["preferred-citation"]
    assert paper["year"] == 2014 and "sparse projectors" in paper["title"]
    assert [a["family-names"] for a in paper["authors"]] == ["Negrel", "Picard", "Gosselin"]
    assert citation["references"][0]["title"] == paper["title"]
