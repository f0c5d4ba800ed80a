"""What a run was made of: package versions, hardware, config, commit, data and time per rule.

:func:`run_info` gathers it into one JSON-serialisable dict
(``results/run_info.json``); :func:`hardware` names the CPU, its vector extensions,
the BLAS libraries and their kernels and faiss's SIMD level, which decide the last
bits of the float32 sums (docs/method.md, "Reproducibility");
:func:`job_benchmarks` and :func:`summarise_benchmarks` read the ``benchmark:`` files
Snakemake writes for every job.
"""

import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

import pandas as pd
from threadpoolctl import threadpool_info

from ndir import __version__, available_cpus

#: CPU flags (``flags`` on x86, ``Features`` on ARM in /proc/cpuinfo) that name vector
#: extensions, matched at the flag's start: SSE, AVX, AVX-512, FMA, F16C, AMX; NEON/ASIMD,
#: SVE, SME (not x86's ``smep``, a protection bit).
VECTOR_FLAG = re.compile(r"sse|ssse3|avx|fma|f16c|amx|neon|asimd|sve|sme(?!p$)")

#: Environment variables that choose a BLAS kernel, SIMD level or thread count.
KERNEL_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "FAISS_OPT_LEVEL")


def package_versions(names=None):
    """{distribution: version} of ``names``, ``None`` for one that is not installed;
    ``names`` None: every distribution installed, sorted by name (what ``pip freeze``
    lists, so that a run can be compared with constraints.txt package by package)."""
    if names is None:
        installed = {dist.metadata["Name"]: dist.version for dist in metadata.distributions()}
        return dict(sorted(installed.items(), key=lambda item: item[0].lower()))
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(repo):
    """The commit checked out in ``repo`` (with ``+dirty`` if it has changes), or None."""

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def read_cpuinfo(path="/proc/cpuinfo"):
    """The first processor's fields of a Linux ``/proc/cpuinfo``, {name: value}; {} where
    the file does not exist (macOS, Windows) or cannot be read."""
    fields = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                name, _, value = line.partition(":")
                fields.setdefault(name.strip(), value.strip())
    except OSError:
        return {}
    return fields


def cpu_info(cpuinfo="/proc/cpuinfo"):
    """The CPU: model, architecture, CPUs and vector extensions.

    Returns
    -------
    dict
        ``model`` (cpuinfo's ``model name``, or on ARM its ``CPU implementer`` and
        ``CPU part``; else ``platform.processor()``; None when nothing names it),
        ``machine`` (``platform.machine()``, e.g. x86_64, aarch64, arm64),
        ``logical_cpus`` (``os.cpu_count()``), ``available_cpus`` (those this process
        may run on) and ``vector_extensions``: the sorted CPU flags of
        :data:`VECTOR_FLAG`, or None where there is no cpuinfo to read them
        from.
    """
    fields = read_cpuinfo(cpuinfo)
    model = fields.get("model name")
    if model is None and "CPU part" in fields:
        model = f"implementer {fields.get('CPU implementer')} part {fields['CPU part']}"
    flags = fields.get("flags", fields.get("Features"))
    return {
        "model": model or platform.processor() or None,
        "machine": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "available_cpus": available_cpus(),
        "vector_extensions": (None if flags is None else sorted(f for f in set(flags.split()) if VECTOR_FLAG.match(f))),
    }


def blas_info():
    """Every BLAS library loaded in this process (NumPy's, SciPy's, faiss's...), as
    threadpoolctl reports it once numpy, scipy.linalg and faiss are imported.

    Returns
    -------
    list of dict, sorted by ``library``
        ``library`` (the shared object's folder and file name, e.g.
        ``numpy.libs/libscipy_openblas64_-....so``, which says whose it is),
        ``internal_api`` (openblas, mkl, blis...), ``version``, ``architecture`` (the
        kernel OpenBLAS picked for this CPU, e.g. Haswell, SkylakeX; None for other
        libraries), ``threading_layer`` and ``num_threads`` (threads of this process:
        the job that writes run_info, not those of the other rules).
    """
    import faiss  # noqa: F401 (loaded so that its BLAS is listed)
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401

    libraries = []
    for pool in threadpool_info():
        if pool["user_api"] != "blas":
            continue
        path = Path(pool["filepath"])
        libraries.append(
            {
                "library": f"{path.parent.name}/{path.name}",
                "internal_api": pool["internal_api"],
                "version": pool["version"],
                "architecture": pool.get("architecture"),
                "threading_layer": pool.get("threading_layer"),
                "num_threads": pool["num_threads"],
            }
        )
    return sorted(libraries, key=lambda library: library["library"])


def faiss_simd():
    """faiss's SIMD: ``level`` (the level its kernels dispatch to on this CPU, e.g.
    AVX2, AVX512; None before faiss 1.13, whose builds had no run-time dispatch) and
    ``compile_options`` (``faiss.get_compile_options()``, e.g. "OPTIMIZE DD AVX2 AVX512":
    the levels built in, or the one variant loaded)."""
    import faiss

    config = getattr(faiss, "SIMDConfig", None)
    return {
        "level": config.get_level_name() if config is not None else None,
        "compile_options": faiss.get_compile_options().strip(),
    }


def hardware():
    """What decides the last bits of the float32 sums besides the code: ``cpu``
    (:func:`cpu_info`), ``blas`` (:func:`blas_info`), ``faiss`` (:func:`faiss_simd`)
    and ``environment`` (the :data:`KERNEL_VARIABLES` that are set)."""
    return {
        "cpu": cpu_info(),
        "blas": blas_info(),
        "faiss": faiss_simd(),
        "environment": {name: os.environ[name] for name in KERNEL_VARIABLES if name in os.environ},
    }


def hardware_table(info):
    """:func:`hardware`'s dict as a two-column table (``item``, ``value``), one row per
    CPU field, BLAS library field (item ``BLAS <library> <field>``), faiss field and
    set environment variable, for the HTML report."""
    cpu = info["cpu"]
    extensions = cpu["vector_extensions"]
    rows = [
        ("CPU model", cpu["model"]),
        ("CPU architecture", cpu["machine"]),
        ("logical CPUs (available to the run)", f"{cpu['logical_cpus']} ({cpu['available_cpus']})"),
        ("vector extensions", "not read (no /proc/cpuinfo)" if extensions is None else " ".join(extensions)),
    ]
    for library in info["blas"]:
        rows += [(f"BLAS {library['library']} {name}", library[name]) for name in library if name != "library"]
    rows += [("faiss SIMD level", info["faiss"]["level"]), ("faiss compile options", info["faiss"]["compile_options"])]
    rows += [(f"environment {name}", value) for name, value in info["environment"].items()]
    return pd.DataFrame(rows, columns=["item", "value"])


def job_benchmarks(folder):
    """One row per job from Snakemake benchmark files under ``folder``.

    Returns
    -------
    DataFrame
        ``rule`` (the first path component), ``job`` (the file's path below
        ``folder``), ``s`` (wall seconds) and ``max_rss`` (peak RSS, MiB).
    """
    folder = Path(folder)
    rows = []
    for path in sorted(folder.rglob("*.tsv")):
        record = pd.read_csv(path, sep="\t").iloc[-1]
        job = path.relative_to(folder)
        rows.append(
            {
                "rule": job.parts[0].removesuffix(".tsv"),
                "job": str(job),
                "s": float(record["s"]),
                "max_rss": float(record["max_rss"]),
            }
        )
    return pd.DataFrame(rows, columns=["rule", "job", "s", "max_rss"])


def summarise_benchmarks(jobs):
    """Per rule: jobs, summed and largest wall time (s), peak RSS (MiB), share of time."""
    summary = jobs.groupby("rule", sort=False).agg(
        jobs=("s", "size"), total_s=("s", "sum"), max_s=("s", "max"), max_rss_mib=("max_rss", "max")
    )
    summary["share_%"] = 100 * summary["total_s"] / summary["total_s"].sum()
    return summary.sort_values("total_s", ascending=False).round(1).reset_index()


def run_info(config, data_summary, benchmarks, repo):
    """Everything needed to tell how a run's tables were made.

    Parameters
    ----------
    config : dict
        The resolved configuration (after schema defaults).
    data_summary : dict
        The data report of ``index_dataset`` (groups, images, skipped files).
    benchmarks : str or Path
        Folder of the run's Snakemake benchmark files.
    repo : str or Path
        The workflow's repository, for its git commit.
    """
    jobs = job_benchmarks(benchmarks)
    return {
        "ndir_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hardware": hardware(),
        "packages": package_versions(),
        "git_commit": git_commit(repo),
        "seed": config["seed"],
        "config": config,
        "data": data_summary,
        "rules": summarise_benchmarks(jobs).to_dict("records") if len(jobs) else [],
        "job_seconds_total": round(float(jobs["s"].sum()), 1),
    }
