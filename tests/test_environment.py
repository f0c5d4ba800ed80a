"""The pinned environment: constraints.txt pins every package the README installs, the
install commands and conda files use it, and the documented run was made with it."""

import json
import os
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
REFERENCE_RUN_INFO = ROOT / "docs" / "reference_run" / "run_info.json"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s=]+)$")


def canonical(name):
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins():
    """{canonical name: version} of constraints.txt; every line a comment or ``name==version``."""
    pinned = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = PIN.match(line.strip())
        assert match, f"constraints.txt: {line!r} is no exact pin (name==version)"
        pinned[canonical(match.group(1))] = match.group(2)
    return pinned


def requirement_names(requirements):
    return {canonical(re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0]) for req in requirements}


def test_every_dependency_the_readme_installs_is_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = requirement_names(project["dependencies"])
    for extra in ("test", "slurm"):
        wanted |= requirement_names(project["optional-dependencies"][extra])
    missing = sorted(wanted - set(pins()))
    assert not missing, f"constraints.txt pins no version of {missing}"


def test_install_commands_and_conda_files_use_the_constraints():
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    installs = re.findall(r"pip install[^&\n]*", quick_start)
    assert len(installs) == 2 and all("-c constraints.txt" in cmd for cmd in installs), installs
    assert "-c constraints.txt" in (ROOT / ".ci" / "run").read_text()
    for env_file, path in (
        (ROOT / "environment.yml", "constraints.txt"),
        (ROOT / "workflow/envs/ndir.yaml", "../../constraints.txt"),
    ):
        pip_section = next(dep for dep in yaml.safe_load(env_file.read_text())["dependencies"] if isinstance(dep, dict))
        assert f"-c {path}" in pip_section["pip"], f"{env_file.name} does not install with -c {path}"
        assert (env_file.parent / path).resolve() == CONSTRAINTS


def test_the_reference_run_was_made_with_the_pinned_versions():
    recorded = json.loads(REFERENCE_RUN_INFO.read_text())["packages"]
    pinned = pins()
    differ = {
        name: (version, pinned[canonical(name)])
        for name, version in recorded.items()
        if canonical(name) in pinned and version != pinned[canonical(name)]
    }
    assert not differ, f"docs/reference_run/run_info.json against constraints.txt (run, pinned): {differ}"
    for name in ("numpy", "opencv-python-headless", "faiss-cpu", "scikit-learn", "scipy", "snakemake"):
        assert name in recorded, f"the reference run records no version of {name}"


@pytest.mark.skipif(not os.environ.get("NDIR_CI"), reason="checks the CI install (NDIR_CI=1, set by .ci/run)")
def test_ci_installed_exactly_the_pinned_versions():
    installed = {canonical(dist.metadata["Name"]): dist.version for dist in metadata.distributions()}
    differ = {
        name: (installed[name], version) for name, version in pins().items() if installed.get(name, version) != version
    }
    assert not differ, f"installed against constraints.txt: {differ}"
