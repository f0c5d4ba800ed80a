"""ndir: near-duplicate image retrieval with sparse rank-optimised projectors.

Reproduces Negrel, Picard & Gosselin, "Efficient metric learning based dimension
reduction using sparse projectors for image near duplicate retrieval", ICPR 2014.
"""

import os

# faiss's OpenMP threads and OpenBLAS spin-wait against each other when both are
# busy (k-means ran up to 16x slower here); OpenMP reads this once, when loaded,
# so it must be set before faiss or scikit-learn is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"


def available_cpus():
    """CPUs this process may run on: its affinity mask where the system has one (Linux,
    where it also reflects a SLURM job's allocation), else ``os.cpu_count()`` (macOS,
    Windows)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
