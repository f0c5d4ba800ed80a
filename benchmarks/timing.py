"""Shared helpers of the benchmark scripts (run them as ``python benchmarks/<x>.py``): the
timing, the machine reference printed beside absolute figures, and the peers that
several scripts time ndir against."""

import time
import warnings
from pathlib import Path

import cv2
import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.mixture import GaussianMixture
from threadpoolctl import threadpool_limits

import ndir
from ndir.descriptors import CELL_SIZES, N_CELLS, STEP, dense_grid
from ndir.preprocess import preprocess
from ndir.provenance import blas_info, cpu_info


def best_time(function, repeats=3, warmup=True):
    """Smallest wall time in seconds of ``repeats`` calls of ``function()``.

    One untimed call first when ``warmup``, so that caches and lazy imports settle.
    """
    if warmup:
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def photos_512x384(n_images):
    """The first ``n_images`` shipped photos that preprocess to 512x384."""
    images = []
    for path in sorted((Path(ndir.__file__).parent / "photos").glob("*.jpg")):
        image = preprocess(cv2.imread(str(path), cv2.IMREAD_GRAYSCALE))
        if image.shape == (384, 512):
            images.append((path.name, image))
        if len(images) == n_images:
            break
    return images


def dense_keypoints(height, width):
    """cv2.KeyPoints centred on dense_hog's patches, scale by scale.

    OpenCV's SIFT bins are 3 * (size / 2) px wide (SIFT_DESCR_SCL_FCTR = 3
    times the keypoint scale size / 2), so a cell of ``cell`` px needs
    size = 2 * cell / 3. Taking size = patch side instead would make each
    descriptor window 6 times wider (36 times the pixels), and the timing
    meaningless.
    """
    keypoints = []
    for cell in CELL_SIZES:
        side = N_CELLS * cell
        for y, x in dense_grid(height, width, STEP, side):
            # a patch over pixels x..x+side-1 is centred on x + (side-1)/2
            centre = (x + (side - 1) / 2, y + (side - 1) / 2)
            keypoints.append(cv2.KeyPoint(*centre, size=2 * cell / 3, angle=0))
    return keypoints


def machine_figures():
    """What places absolute timings on the machine that measured them: OpenCV SIFT's ms
    per 512x384 photo (one thread, on dense_hog's grid: the reference code of
    ``bench_descriptors.py``) and one-thread float32 GEMM GFLOP/s (2048^3), with the CPU
    (:func:`cpu_description`), as ``{"sift_ms", "sgemm_gflops", "cpu"}``.

    Timings on shared machines drift by 2x from day to day: a figure compares with
    another only where their references agree (or scaled by them).
    """
    (_, image), *_ = photos_512x384(1)
    keypoints = dense_keypoints(*image.shape)
    sift = cv2.SIFT_create()
    threads = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        sift_ms = 1e3 * best_time(lambda: sift.compute(image, keypoints), 2)
    finally:
        cv2.setNumThreads(threads)
    a, b = (np.random.default_rng(seed).standard_normal((2048, 2048), dtype=np.float32) for seed in (0, 1))
    with threadpool_limits(1, user_api="blas"):
        gflops = 2 * 2048**3 / best_time(lambda: a @ b, 3) / 1e9
    return {"sift_ms": round(sift_ms), "sgemm_gflops": round(gflops), "cpu": cpu_description(cpu_info(), blas_info())}


def machine_reference(figures=None):
    """:func:`machine_figures` (measured now unless given) as one line to print beside a
    timing."""
    figures = figures or machine_figures()
    return (
        f"machine reference: OpenCV SIFT {figures['sift_ms']} ms per 512x384 image, "
        f"1-thread SGEMM {figures['sgemm_gflops']} GFLOP/s ({figures['cpu']})"
    )


#: The widest vector extension a CPU flag names, widest first (x86's, then ARM's).
VECTOR_LEVELS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sve", "SVE"), ("asimd", "NEON"))


def cpu_description(cpu, blas):
    """The CPU as the machine reference names it: its model, its widest vector extension
    and the kernel NumPy's OpenBLAS picked on it, e.g. ``"AMD EPYC, AVX-512, OpenBLAS
    SkylakeX"``.

    Two CPUs of one model name can differ in both (AMD EPYCs with AVX2 only and with
    AVX-512 both report "AMD EPYC"), and with them the timings and the float32 bits.

    cpu : dict of :func:`ndir.provenance.cpu_info` (``model``, ``machine``,
        ``vector_extensions``, the latter None where no cpuinfo names them).
    blas : list of :func:`ndir.provenance.blas_info` (``library``, ``architecture``).
    """
    parts = [cpu["model"] or cpu["machine"]]
    extensions = set(cpu["vector_extensions"] or ())
    parts += [name for flag, name in VECTOR_LEVELS if flag in extensions][:1]
    kernels = [library["architecture"] for library in blas if library["library"].startswith("numpy")]
    parts += [f"OpenBLAS {kernel}" for kernel in kernels[:1] if kernel]
    return ", ".join(parts)


def fit_sklearn_gmm(X, weights, means, variances, max_iter):
    """scikit-learn's diagonal GaussianMixture from the given start, ``max_iter`` EM
    iterations with no early stop: the peer of ``ndir.codebooks.gmm_em``."""
    mixture = GaussianMixture(
        len(weights),
        covariance_type="diag",
        max_iter=max_iter,
        tol=0.0,
        init_params="random",
        weights_init=weights,
        means_init=means,
        precisions_init=1 / variances,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mixture.fit(X)
