"""benchmarks/timing.py: how the machine reference names the CPU."""

import pytest

from .conftest import benchmark_script

NUMPY = "numpy.libs/libscipy_openblas64_-32a4b2a6.so"
FAISS = "faiss_cpu.libs/libopenblaso-r0-d77a1985.3.15.so"


@pytest.fixture(scope="module")
def timing():
    return benchmark_script("timing")


def cpu(model, extensions):
    return {"model": model, "machine": "x86_64", "vector_extensions": extensions}


def test_two_cpus_of_one_model_name_are_told_apart_by_their_widest_extension(timing):
    # Seen on this project's machines: both report "AMD EPYC"; faiss's own OpenBLAS
    # picks another kernel than NumPy's on the second, whose kernel is the one named.
    blas = [{"library": FAISS, "architecture": "Zen"}, {"library": NUMPY, "architecture": "SkylakeX"}]
    avx512 = cpu("AMD EPYC", ["avx", "avx2", "avx512bw", "avx512f", "fma", "sse2"])
    assert timing.cpu_description(avx512, blas) == "AMD EPYC, AVX-512, OpenBLAS SkylakeX"
    avx2 = cpu("AMD EPYC", ["avx", "avx2", "fma", "sse2"])
    haswell = [{"library": NUMPY, "architecture": "Haswell"}]
    assert timing.cpu_description(avx2, haswell) == "AMD EPYC, AVX2, OpenBLAS Haswell"


def test_what_cannot_be_read_is_left_out(timing):
    # No /proc/cpuinfo (macOS): no model or extensions; a BLAS other than OpenBLAS
    # reports no architecture.
    assert timing.cpu_description(cpu(None, None), [{"library": NUMPY, "architecture": None}]) == "x86_64"
    arm = cpu("implementer 0x41 part 0xd0c", ["asimd"])
    assert timing.cpu_description(arm, []) == "implementer 0x41 part 0xd0c, NEON"
