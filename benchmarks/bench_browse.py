"""Time the retrieval browser at Holidays scale in headless Chromium.

Builds the made-up Holidays-scale page of the browser's tests (``tests/test_browse.py``:
745 test images, 250 queries, the paper's 168 methods), then, ``--repeats`` times, opens
it and switches the queries view to three other methods, and prints the page's data size,
the time from ``goto`` to the page being ready, each switch's time until the list shows
the new method, and the longest ``render()`` the page measured itself (ms), beside the
machine reference. The tests check that the page opens and switches; how fast it does is
measured here, never in a test (a shared 2-core machine under load moves it by 2x).

Needs Playwright and Debian's ``chromium`` (``apt-get install -y chromium``).

Run: python benchmarks/bench_browse.py [--repeats 3]
Target: opening and each switch under 2 s on 2 cores.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

from timing import machine_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ndir import browse  # noqa: E402
from tests.browsers import Opened, chromium  # noqa: E402
from tests.test_browse import holidays_scale  # noqa: E402

SWITCHED_TO = ("method-100", "method-7", "method-167")


def open_and_switch(browser, folder):
    """Seconds to open the page, seconds of each switch, the longest render (ms), and
    the page's errors."""
    started = time.perf_counter()
    opened = Opened(browser, folder)
    try:
        opened_s = time.perf_counter() - started
        switches = []
        for key in SWITCHED_TO:
            started = time.perf_counter()
            opened.page.select_option("#method", key)
            opened.page.wait_for_function(f"document.getElementById('queries').dataset.method === '{key}'")
            switches.append(time.perf_counter() - started)
        longest_render = max(r["ms"] for r in opened.page.evaluate("window.NDIR_BROWSER.renders"))
        return opened_s, switches, longest_render, opened.errors
    finally:
        opened.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(machine_reference())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "page"
        data, *_ = holidays_scale(folder)
        megabytes = (folder / browse.DATA_FILE).stat().st_size / 1e6
        print(f"{len(data['images']['names'])} images, {len(data['queries'])} queries, {len(data['methods'])} methods")
        print(f"page data {megabytes:.1f} MB")
        print(f"{'repeat':>6} {'open s':>8} {'switches s':>22} {'longest render ms':>18}")
        with chromium() as browser:
            for repeat in range(args.repeats):
                opened_s, switches, longest_render, errors = open_and_switch(browser, folder)
                shown = " ".join(f"{s:6.3f}" for s in switches)
                print(f"{repeat:>6} {opened_s:8.3f} {shown:>22} {longest_render:18.0f}")
                if errors:
                    print(f"       errors on the page: {errors}")


if __name__ == "__main__":
    main()
