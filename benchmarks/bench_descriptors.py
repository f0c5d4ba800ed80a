"""Time dense_hog on 512x384 photos against OpenCV SIFT on the same dense grid.

The images are the shipped 640x480 photos (src/ndir/photos/) after
ndir.preprocess.preprocess (resize to 512 px wide, histogram equalisation).
OpenCV SIFT describes one keypoint per dense_hog patch, centred on the patch,
with the keypoint size whose 4x4-bin descriptor window is the patch (see
dense_keypoints); it is a speed reference, not the same descriptor.

    python benchmarks/bench_descriptors.py [--images 3] [--repeats 5]

OpenCV SIFT is timed once per image (it takes seconds); dense_hog best of
--repeats. The machine's other load shows up directly in these figures.
"""

import argparse
import importlib.util

import cv2
import numpy as np
from timing import best_time, dense_keypoints, photos_512x384

from ndir.descriptors import CELL_SIZES, STEP, dense_hog


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    images = photos_512x384(args.images)
    sift = cv2.SIFT_create()
    keypoints = dense_keypoints(384, 512)
    print(
        f"{len(images)} photos at 512x384, step {STEP}, cell sizes {CELL_SIZES}, "
        f"{len(keypoints)} patches; OpenCV {cv2.__version__}, "
        f"{cv2.getNumThreads()} OpenCV threads"
    )
    hog_seconds, sift_seconds = [], []
    for name, image in images:
        descriptors = dense_hog(image, step=STEP, cell_sizes=CELL_SIZES)
        hog_seconds.append(best_time(lambda: dense_hog(image, STEP, CELL_SIZES), args.repeats, warmup=False))
        sift_seconds.append(best_time(lambda: sift.compute(image, keypoints), 1, warmup=False))
        print(
            f"  {name:40s} dense_hog {1e3 * hog_seconds[-1]:7.1f} ms "
            f"({len(descriptors)} descriptors, {descriptors.nbytes / 2**20:.1f} MiB)   "
            f"OpenCV SIFT {1e3 * sift_seconds[-1]:7.1f} ms"
        )
    hog_ms = 1e3 * float(np.median(hog_seconds))
    sift_ms = 1e3 * float(np.median(sift_seconds))
    print(
        f"median dense_hog   {hog_ms:7.1f} ms/image, "
        f"{len(descriptors)} descriptors/image, "
        f"{1e3 * hog_ms / len(descriptors):.2f} us/descriptor"
    )
    print(f"median OpenCV SIFT {sift_ms:7.1f} ms/image   x{sift_ms / hog_ms:.1f} slower")
    installed = importlib.util.find_spec("cyvlfeat") is not None
    print(
        "cyvlfeat (VLFeat dsift) is "
        + ("installed, not compared here" if installed else "not installed: no VLFeat timing")
    )


if __name__ == "__main__":
    main()
