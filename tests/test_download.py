"""Fetching Holidays and UKBench (ndir.download) from servers on 127.0.0.1 serving small
archives in their layouts: downloads, resumes, checks, each archive's URLs tried in
order, and each failure's message."""

import contextlib
import copy
import errno
import hashlib
import io
import json
import os
import socket
import stat
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

import ndir.download
from ndir.download import DownloadError, download, fetch_dataset, unpack_images
from ndir.errors import ConfigError

from .conftest import REPO, import_or_skip
from .servers import ftp_server, http_server


def jpeg(seed):
    """A small JPEG's bytes, different for each seed."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG")
    return out.getvalue()


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def holidays_archives(folder, n_groups=4, per_group=3):
    """jpg1.tar.gz and jpg2.tar.gz as INRIA publishes them (``jpg/100000.jpg``...), the
    groups split between the two; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for part, groups in enumerate(np.array_split(np.arange(n_groups), 2), start=1):
        path = folder / f"jpg{part}.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for group in groups:
                for view in range(per_group):
                    number = 100000 + 100 * int(group) + view
                    add(tar, f"jpg/{number}.jpg", jpeg(number))
        paths.append(path)
    return paths


def ukbench_zip(folder, n_groups=3):
    """ukbench.zip as it is published: ``full/ukbench00000.jpg``..., thumbnails of the
    same names and a web page."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ukbench.zip"
    with zipfile.ZipFile(path, "w") as zipped:
        for number in range(4 * n_groups):
            zipped.writestr(f"full/ukbench{number:05d}.jpg", jpeg(number))
            zipped.writestr(f"thumbnails/ukbench{number:05d}.jpg", jpeg(10_000 + number))
        zipped.writestr("index.html", "<html></html>")
    return path


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def archives_of(urls):
    """``download.<kind>.archives`` for ``urls``: one archive per item, a URL or a list
    of URLs tried in order, named after the file of its first URL."""
    archives = []
    for item in urls:
        tried = [item] if isinstance(item, str) else list(item)
        archives.append({"name": tried[0].rsplit("/", 1)[-1], "urls": tried})
    return archives


def fetch(urls, root, kind="holidays", inside="jpg", n_images=12, n_groups=4, pins=None):
    return fetch_dataset(
        archives_of(urls),
        root / "archives",
        root / "images",
        root / "download.json",
        inside=inside,
        kind=kind,
        n_images=n_images,
        n_groups=n_groups,
        sha256=pins or {},
        progress=False,
    )


def nothing_left_behind(root):
    """No images folder, no temporary folder beside it: nothing half-unpacked."""
    return sorted(path.name for path in root.iterdir() if path.name != "archives") == []


def test_holidays_over_http_is_downloaded_unpacked_checked_and_recorded(tmp_path):
    served = holidays_archives(tmp_path / "served")
    root = tmp_path / "data"
    with http_server(tmp_path / "served") as server:
        urls = [f"{server.url}/{path.name}" for path in served]
        entries = fetch(urls, root)
    assert sorted(path.name for path in (root / "images").iterdir()) == sorted(
        f"{100000 + 100 * g + v}.jpg" for g in range(4) for v in range(3)
    )
    assert (root / "images/100201.jpg").read_bytes() == jpeg(100201)
    record = json.loads((root / "download.json").read_text())
    assert record == entries
    assert [(entry["url"], entry["bytes"], entry["sha256"]) for entry in record] == [
        (url, path.stat().st_size, sha256(path)) for url, path in zip(urls, served)
    ]
    # The archives are kept: a second fetch downloads nothing, and records no URL.
    with http_server(tmp_path / "served") as server:
        (root / "images").rename(tmp_path / "first")
        again = fetch([f"{server.url}/{path.name}" for path in served], root)
        assert server.requests == []
    assert [(entry["url"], entry["sha256"]) for entry in again] == [(None, sha256(path)) for path in served]


def test_ukbench_over_ftp_takes_the_full_images_not_the_thumbnails(tmp_path):
    import_or_skip("pyftpdlib", "the FTP test server (pip install pyftpdlib)")
    served = ukbench_zip(tmp_path / "served")
    root = tmp_path / "data"
    with ftp_server(tmp_path / "served") as url:
        fetch([f"{url}/ukbench.zip"], root, kind="ukbench", inside="full", n_images=12, n_groups=3)
    assert len(list((root / "images").iterdir())) == 12
    assert (root / "images/ukbench00005.jpg").read_bytes() == jpeg(5)  # not the thumbnail
    assert json.loads((root / "download.json").read_text())[0]["sha256"] == sha256(served)


def test_a_cut_http_download_is_kept_and_resumed_with_a_range_request(tmp_path):
    served = holidays_archives(tmp_path / "served")[0]
    dest = tmp_path / "archives" / served.name
    with http_server(tmp_path / "served") as server:
        url = f"{server.url}/{served.name}"
        server.cut.add(served.name)
        with pytest.raises(DownloadError) as cut:
            download(url, dest, progress=False)
        part = dest.with_name(dest.name + ".part")
        size = served.stat().st_size
        assert str(cut.value) == (
            f"{url}: the download stopped at {part.stat().st_size:,} of {size:,} bytes (kept in {part}); run the "
            f"workflow again to resume, or download it by hand to {dest}, or set dataset.path to a folder of the "
            "unpacked images"
        )
        assert 0 < part.stat().st_size < size and not dest.exists()
        server.cut.clear()
        entry = download(url, dest, progress=False)
        assert server.requests[-1] == ("GET", f"/{served.name}", f"bytes={size // 2}-")
    assert dest.read_bytes() == served.read_bytes() and not part.exists()
    assert entry == {"url": url, "bytes": size, "sha256": sha256(served)}


def _cut_download(tmp_path, n_bytes):
    """A served Holidays archive, where the download goes, and its ``.part`` holding the
    first ``n_bytes`` (a download cut short)."""
    served = holidays_archives(tmp_path / "served")[0]
    dest = tmp_path / "archives" / served.name
    dest.parent.mkdir()
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(served.read_bytes()[:n_bytes])
    return served, dest, part


def test_a_server_that_ignores_the_range_sends_the_whole_file_again(tmp_path):
    """A 200 to a resumed request is the whole archive: it replaces the part instead of
    being appended to it."""
    served, dest, part = _cut_download(tmp_path, 1000)
    with http_server(tmp_path / "served") as server:
        server.ignore_range = True
        entry = download(f"{server.url}/{served.name}", dest, progress=False)
        assert server.requests[-1] == ("GET", f"/{served.name}", "bytes=1000-")
    assert dest.read_bytes() == served.read_bytes() and entry["bytes"] == served.stat().st_size


def test_a_cut_ftp_download_is_resumed(tmp_path):
    import_or_skip("pyftpdlib", "the FTP test server (pip install pyftpdlib)")
    served = ukbench_zip(tmp_path / "served")
    dest = tmp_path / "archives" / served.name
    dest.parent.mkdir()
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(served.read_bytes()[:1000])
    with ftp_server(tmp_path / "served") as url:
        download(f"{url}/ukbench.zip", dest, progress=False)
    assert dest.read_bytes() == served.read_bytes() and not part.exists()


def closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_no_server_and_a_missing_file_name_the_url_and_the_fix(tmp_path):
    root = tmp_path / "data"
    url = f"http://127.0.0.1:{closed_port()}/jpg1.tar.gz"
    dest = root / "archives/jpg1.tar.gz"
    with pytest.raises(DownloadError) as offline:
        download(url, dest, progress=False)
    assert str(offline.value) == (
        f"{url}: cannot download (Connection refused); download it by hand to {dest}, or set "
        "dataset.path to a folder of the unpacked images"
    )
    with pytest.raises(DownloadError) as offline:
        fetch([url], root)
    assert str(offline.value) == (
        "download.holidays.archives[0].urls: jpg1.tar.gz could not be downloaded from its URL; add a URL that "
        f"serves jpg1.tar.gz to download.holidays.archives[0].urls, or download it by hand to {dest}, or set "
        f"dataset.path to a folder of the unpacked images\n  {url}: cannot download (Connection refused)"
    )
    (tmp_path / "served").mkdir()
    with http_server(tmp_path / "served") as server:
        with pytest.raises(
            DownloadError, match=r"\n  http://\S+/jpg1.tar.gz: the server answered HTTP 404 File not found$"
        ):
            fetch([f"{server.url}/jpg1.tar.gz"], root)
    assert nothing_left_behind(root)


def test_a_missing_file_on_an_ftp_server_is_named(tmp_path):
    import_or_skip("pyftpdlib", "the FTP test server (pip install pyftpdlib)")
    (tmp_path / "served").mkdir()
    with ftp_server(tmp_path / "served") as url:
        with pytest.raises(DownloadError, match=r"\n  ftp://\S+/ukbench.zip: the FTP server refused it \(550 .*\)$"):
            fetch([f"{url}/ukbench.zip"], tmp_path / "data", kind="ukbench")


def test_a_wrong_checksum_is_refused_and_the_file_set_aside(tmp_path):
    served = holidays_archives(tmp_path / "served")
    root = tmp_path / "data"
    wrong = "0" * 64
    with http_server(tmp_path / "served") as server:
        urls = [f"{server.url}/{path.name}" for path in served]
        with pytest.raises(DownloadError) as refused:
            fetch(urls, root, pins={"jpg2.tar.gz": wrong})
    rejected = root / "archives/jpg2.tar.gz.rejected"
    assert str(refused.value) == (
        "download.holidays.archives[1].urls: jpg2.tar.gz could not be downloaded from its URL; add a URL that "
        f"serves jpg2.tar.gz to download.holidays.archives[1].urls, or download it by hand to "
        f"{root / 'archives/jpg2.tar.gz'}, or set dataset.path to a folder of the unpacked images\n"
        f'  {urls[1]}: its SHA-256 is {sha256(served[1])}, not the {wrong} pinned in download.holidays.sha256["'
        f'jpg2.tar.gz"] (moved to {rejected})'
    )
    assert rejected.read_bytes() == served[1].read_bytes() and not (root / "archives/jpg2.tar.gz").exists()
    assert nothing_left_behind(root)
    # The right pin passes, in any case.
    with http_server(tmp_path / "served") as server:
        fetch([f"{server.url}/{path.name}" for path in served], root, pins={"jpg2.tar.gz": sha256(served[1]).upper()})
    assert len(list((root / "images").iterdir())) == 12


def test_a_damaged_archive_is_named_and_nothing_is_unpacked(tmp_path):
    served = holidays_archives(tmp_path / "served")
    data = served[1].read_bytes()
    served[1].write_bytes(data[: len(data) // 2])  # the server's own copy is cut
    root = tmp_path / "data"
    with http_server(tmp_path / "served") as server:
        with pytest.raises(DownloadError) as damaged:
            fetch([f"{server.url}/{path.name}" for path in served], root)
    archive = root / "archives/jpg2.tar.gz"
    assert str(damaged.value).startswith(f"{archive}: a damaged gzip/tar archive, cut short or corrupted (")
    assert str(damaged.value).endswith(
        f"delete it and run the workflow again, or download it by hand to {archive}, or set dataset.path to a "
        "folder of the unpacked images"
    )
    assert nothing_left_behind(root)


def test_archives_of_other_images_are_refused(tmp_path):
    served = holidays_archives(tmp_path / "served", n_groups=3)
    root = tmp_path / "data"
    with http_server(tmp_path / "served") as server:
        with pytest.raises(DownloadError) as other:
            fetch([f"{server.url}/{path.name}" for path in served], root, n_images=1491, n_groups=500)
    assert str(other.value) == (
        f"{root / 'images'}: the archives hold 9 images in 3 groups, not the 1491 in 500 of holidays; check "
        "download.holidays.archives (another data set, or a mirror that changed it?)"
    )
    assert nothing_left_behind(root)


def test_an_archive_without_the_image_folder_is_named(tmp_path):
    archive = ukbench_zip(tmp_path)
    with pytest.raises(DownloadError) as empty:
        unpack_images([archive], tmp_path / "images", "jpg", "ukbench", 12, 3)
    assert str(empty.value) == (
        f"{archive}: no image in a folder jpg/ of the archive; check the URL, or download.ukbench.folder_in_archive"
    )
    assert not (tmp_path / "images").exists()


def test_members_cannot_write_outside_the_images_folder(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        add(tar, "jpg/../../escaped.jpg", jpeg(0))
        for number in (100000, 100001):
            add(tar, f"jpg/{number}.jpg", jpeg(number))
    unpack_images([archive], tmp_path / "out/images", "jpg", "holidays", 2, 1)
    assert sorted(path.name for path in (tmp_path / "out/images").iterdir()) == ["100000.jpg", "100001.jpg"]
    assert not (tmp_path / "escaped.jpg").exists()


@contextlib.contextmanager
def tiny_run_on_served(tmp_path, served, kind, urls_of, n_images, n_groups):
    """Run the tiny config on the ``kind`` data set whose archives the folder ``served``
    holds, fetched over HTTP (``urls_of(server)``: their URLs), and check that it passed
    and recorded each archive's SHA-256; yields the run's folder, its config arguments
    and the server, still serving."""
    from .conftest import REPO, run_snakemake

    workdir = tmp_path / "run"
    workdir.mkdir()
    with http_server(served) as server:
        urls = urls_of(server)
        archives = archives_of(urls)
        download = {"folder": "downloads", kind: {"archives": archives, "n_images": n_images, "n_groups": n_groups}}
        config = [
            "--configfile",
            str(REPO / "tests/configs/tiny.yaml"),
            "--config",
            f"dataset={{kind: {kind}}}",
            f"download={json.dumps(download)}",
        ]
        run = run_snakemake(workdir, "--cores", "2", *config, check=False)
        assert run.returncode == 0, run.stderr[-6000:]
        recorded = json.loads((workdir / "results/run_info.json").read_text())["data"]["download"]
        assert [(entry["url"], entry["sha256"]) for entry in recorded] == [
            (url, sha256(served / url.rsplit("/", 1)[-1])) for url in urls
        ]
        yield workdir, config, server


@pytest.mark.workflow  # runs the tiny config end to end (1.5 min)
def test_the_workflow_fetches_holidays_and_runs_the_tiny_config_on_it(tmp_path):
    """The tiny config on a Holidays-layout data set served over HTTP: fetched, checked,
    unpacked outside results/, run through every table, the archives' SHA-256 in
    run_info.json; a second run fetches nothing."""
    from ndir.data import build_embedded_dataset

    from .conftest import run_snakemake

    photos = build_embedded_dataset(tmp_path / "photos", n_groups=40, seed=7, view_size=192)
    served = tmp_path / "served"
    served.mkdir()
    paths = sorted(photos["path"])
    for part, half in enumerate((paths[: len(paths) // 2], paths[len(paths) // 2 :]), start=1):
        with tarfile.open(served / f"jpg{part}.tar.gz", "w:gz") as tar:
            for path in half:
                tar.add(path, arcname=f"jpg/{path.rsplit('/', 1)[-1]}")
    urls_of = lambda server: [f"{server.url}/jpg{part}.tar.gz" for part in (1, 2)]  # noqa: E731
    with tiny_run_on_served(tmp_path, served, "holidays", urls_of, len(photos), 40) as (workdir, config, server):
        assert len(list((workdir / "downloads/holidays/images").glob("*.jpg"))) == len(photos)
        assert (workdir / "results/tables/table1.csv").is_file()
        server.requests.clear()
        again = run_snakemake(workdir, "-n", *config)
        assert "Nothing to be done" in again.stdout + again.stderr and server.requests == []


@pytest.mark.workflow  # runs the tiny config end to end (1.5 min)
def test_the_workflow_fetches_ukbench_and_reports_the_ns_score_beside_the_map(tmp_path):
    """The tiny config on a UKBench-layout data set (groups of 4 consecutive images,
    ``full/ukbench00000.jpg``...) served over HTTP: every table of its reduced and
    learned signatures, and the seeds comparison, carry the N-S score (out of 4)
    beside the mAP."""
    import pandas as pd

    from ndir.data import build_embedded_dataset

    photos = build_embedded_dataset(tmp_path / "photos", n_groups=90, seed=7, view_size=192)
    # UKBench's groups have 4 images: the first 4 views of each group of at least 4.
    views = photos.groupby("group").filter(lambda group: len(group) >= 4).groupby("group").head(4)
    served = tmp_path / "served"
    served.mkdir()
    with zipfile.ZipFile(served / "ukbench.zip", "w") as zipped:
        for number, path in enumerate(views["path"]):
            zipped.write(path, f"full/ukbench{number:05d}.jpg")
    urls_of = lambda server: [f"{server.url}/ukbench.zip"]  # noqa: E731
    with tiny_run_on_served(tmp_path, served, "ukbench", urls_of, len(views), len(views) // 4) as (workdir, _, _):
        tables = workdir / "results/tables"
        for name, beside in (("table1", "Full"), ("table2", "90% R8"), ("seeds_comparison", "Test mAP")):
            table = pd.read_csv(tables / f"{name}.csv")
            columns = list(table.columns)
            ns_column = columns[columns.index(beside) + 1]
            assert ns_column.startswith("N-S"), (name, columns)
            ns_columns = [column for column in columns if column.startswith("N-S")]
            scores = table[ns_columns].to_numpy(dtype=float)
            # Out of 4, and at least 1 (each query finds itself first).
            assert np.nanmin(scores) >= 1.0 and np.nanmax(scores) <= 4.0, (name, scores)


def test_a_fresh_download_asks_for_the_whole_file_without_a_range(tmp_path):
    served = holidays_archives(tmp_path / "served")[0]
    dest = tmp_path / "archives" / served.name
    with http_server(tmp_path / "served") as server:
        download(f"{server.url}/{served.name}", dest, progress=False)
        assert server.requests == [("GET", f"/{served.name}", None)]
    assert dest.read_bytes() == served.read_bytes()


def test_a_resumed_download_of_a_file_gone_from_the_server_is_refused_and_the_part_kept(tmp_path):
    """Only a 416 on a resumed download means that the part is whole; a 404 is an error,
    not a complete archive."""
    served, dest, part = _cut_download(tmp_path, 100)
    (tmp_path / "empty").mkdir()
    with http_server(tmp_path / "empty") as server:
        url = f"{server.url}/{served.name}"
        with pytest.raises(DownloadError, match=r"the server answered HTTP 404 File not found; download it"):
            download(url, dest, progress=False)
        assert set(server.requests) == {("GET", f"/{served.name}", "bytes=100-")}
    assert part.read_bytes() == served.read_bytes()[:100] and not dest.exists()


@pytest.mark.parametrize("digit", ["0", "f"])
def test_an_archive_already_there_whose_checksum_differs_from_the_pin_is_refused(tmp_path, digit):
    """Whether the pin sorts before or after the archive's checksum."""
    served = holidays_archives(tmp_path / "served")
    root = tmp_path / "data"
    (root / "archives").mkdir(parents=True)
    for path in served:
        (root / "archives" / path.name).write_bytes(path.read_bytes())
    wrong = digit * 64
    with pytest.raises(DownloadError) as refused:
        fetch(["http://127.0.0.1:9/jpg1.tar.gz", "http://127.0.0.1:9/jpg2.tar.gz"], root, pins={"jpg2.tar.gz": wrong})
    assert str(refused.value) == (
        f"{root / 'archives/jpg2.tar.gz'}: its SHA-256 is {sha256(served[1])}, not the {wrong} pinned in "
        'download.holidays.sha256["jpg2.tar.gz"]; delete it to download it again, or correct the pin'
    )
    assert nothing_left_behind(root)


# --------------------------------------------------------------------------- each archive's URLs, in order


def served_folder(tmp_path, name, files=()):
    """A folder ``tmp_path/name`` for a server, holding copies of ``files``."""
    folder = tmp_path / name
    folder.mkdir()
    for path in files:
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


@pytest.mark.parametrize("first", ["refused", "404", "ftp 550"])
def test_each_archive_comes_from_the_first_of_its_urls_that_gives_it(tmp_path, caplog, first):
    """INRIA's current host gone (no server, a 404) or its FTP server refusing: the next
    URL of each archive serves it, and the record names that URL."""
    served = holidays_archives(tmp_path / "served")
    root = tmp_path / "data"
    with contextlib.ExitStack() as stack:
        if first == "refused":
            base = f"http://127.0.0.1:{closed_port()}"
        elif first == "404":
            gone = stack.enter_context(http_server(served_folder(tmp_path, "gone")))
            base = gone.url
        else:
            import_or_skip("pyftpdlib", "the FTP test server (pip install pyftpdlib)")
            base = stack.enter_context(ftp_server(served_folder(tmp_path, "gone")))
        mirror = stack.enter_context(http_server(tmp_path / "served"))
        urls = [[f"{base}/{path.name}", f"{mirror.url}/{path.name}"] for path in served]
        with caplog.at_level("WARNING", logger="ndir.download"):
            entries = fetch(urls, root)
        if first == "404":
            # (The test server logs a 404 twice.)
            assert sorted({request[1] for request in gone.requests}) == ["/jpg1.tar.gz", "/jpg2.tar.gz"]
    assert [(entry["url"], entry["sha256"]) for entry in entries] == [
        (tried[1], sha256(path)) for tried, path in zip(urls, served)
    ]
    assert len(list((root / "images").iterdir())) == 12
    assert [record.getMessage().split("; ")[-1] for record in caplog.records] == [
        f"trying the next URL of download.holidays.archives[{number}].urls" for number in (0, 1)
    ]


def test_when_every_url_of_an_archive_fails_one_error_lists_each_with_its_failure(tmp_path):
    """No server, a 404, a copy of other bytes than the pin: one error, each URL on a
    line with its own failure, and the fixes, the config key first."""
    right = holidays_archives(tmp_path / "served")
    other = holidays_archives(tmp_path / "other", n_groups=2)
    root = tmp_path / "data"
    dest = root / "archives/jpg1.tar.gz"
    rejected = root / "archives/jpg1.tar.gz.rejected"
    with http_server(served_folder(tmp_path, "gone")) as gone, http_server(tmp_path / "other") as changed:
        urls = [
            f"http://127.0.0.1:{closed_port()}/jpg1.tar.gz",
            f"{gone.url}/jpg1.tar.gz",
            f"{changed.url}/jpg1.tar.gz",
        ]
        with pytest.raises(DownloadError) as failed:
            fetch([urls], root, pins={"jpg1.tar.gz": sha256(right[0])})
    assert str(failed.value) == (
        "download.holidays.archives[0].urls: jpg1.tar.gz could not be downloaded from any of its 3 URLs, tried in "
        "this order; add a URL that serves jpg1.tar.gz to download.holidays.archives[0].urls, or download it by "
        f"hand to {dest}, or set dataset.path to a folder of the unpacked images\n"
        f"  {urls[0]}: cannot download (Connection refused)\n"
        f"  {urls[1]}: the server answered HTTP 404 File not found\n"
        f"  {urls[2]}: its SHA-256 is {sha256(other[0])}, not the {sha256(right[0])} pinned in "
        f'download.holidays.sha256["jpg1.tar.gz"] (moved to {rejected})'
    )
    assert rejected.read_bytes() == other[0].read_bytes() and not dest.exists()
    assert nothing_left_behind(root)


def test_a_url_whose_archive_fails_its_pin_counts_as_failed_and_the_next_is_tried(tmp_path):
    right = holidays_archives(tmp_path / "served")
    holidays_archives(tmp_path / "other", n_groups=2)
    root = tmp_path / "data"
    with http_server(tmp_path / "other") as changed, http_server(tmp_path / "served") as mirror:
        urls = [[f"{changed.url}/{path.name}", f"{mirror.url}/{path.name}"] for path in right]
        entries = fetch(urls, root, pins={path.name: sha256(path) for path in right})
    assert [entry["url"] for entry in entries] == [tried[1] for tried in urls]
    assert [(root / f"archives/{path.name}").read_bytes() for path in right] == [path.read_bytes() for path in right]
    assert len(list((root / "images").iterdir())) == 12


def test_a_web_page_in_place_of_an_archive_counts_as_failed_and_the_next_is_tried(tmp_path):
    """A host that moved answers 200 with a page: without a pin, the archive's first
    bytes tell; the page is set aside and the next URL gives the archive."""
    right = holidays_archives(tmp_path / "served")
    moved = served_folder(tmp_path, "moved")
    for path in right:
        (moved / path.name).write_text("<!DOCTYPE html><html>The data sets have moved</html>")
    root = tmp_path / "data"
    dest = root / "archives/jpg1.tar.gz"
    with http_server(moved) as page:
        with pytest.raises(DownloadError) as refused:
            download(f"{page.url}/jpg1.tar.gz", dest, progress=False)
    assert str(refused.value) == (
        f"{page.url}/jpg1.tar.gz: what it gave is not a gzip/tar archive but begins with b'<!DOCTYPE html><' "
        f"(a web page? moved to {dest}.rejected); check the URL, or download it by hand to {dest}, or set "
        "dataset.path to a folder of the unpacked images"
    )
    assert not dest.exists()
    with http_server(moved) as page, http_server(tmp_path / "served") as mirror:
        urls = [[f"{page.url}/{path.name}", f"{mirror.url}/{path.name}"] for path in right]
        entries = fetch(urls, root)
    assert [entry["url"] for entry in entries] == [tried[1] for tried in urls]
    assert len(list((root / "images").iterdir())) == 12


def test_a_download_cut_by_one_url_is_kept_and_resumed_from_the_next(tmp_path):
    served = holidays_archives(tmp_path / "served")[0]
    size = served.stat().st_size
    root = tmp_path / "data"
    dest = root / "archives/jpg1.tar.gz"
    part = root / "archives/jpg1.tar.gz.part"
    with http_server(tmp_path / "served") as flaky, http_server(served_folder(tmp_path, "gone")) as gone:
        flaky.cut.add(served.name)
        urls = [f"{flaky.url}/jpg1.tar.gz", f"{gone.url}/jpg1.tar.gz"]
        with pytest.raises(DownloadError) as cut:
            fetch([urls], root, n_images=6, n_groups=2)
        assert set(gone.requests) == {("GET", "/jpg1.tar.gz", f"bytes={size // 2}-")}  # logged twice: a 404
    assert str(cut.value).split("\n")[0] == (
        "download.holidays.archives[0].urls: jpg1.tar.gz could not be downloaded from any of its 2 URLs, tried in "
        f"this order; run the workflow again to resume the {size // 2:,} bytes kept in {part}, or add a URL that "
        f"serves jpg1.tar.gz to download.holidays.archives[0].urls, or download it by hand to {dest}, or set "
        "dataset.path to a folder of the unpacked images"
    )
    assert str(cut.value).split("\n")[1] == (
        f"  {urls[0]}: the download stopped at {size // 2:,} of {size:,} bytes (kept in {part})"
    )
    with http_server(tmp_path / "served") as mirror:
        fetch(
            [[f"http://127.0.0.1:{closed_port()}/jpg1.tar.gz", f"{mirror.url}/jpg1.tar.gz"]],
            root,
            n_images=6,
            n_groups=2,
        )
        assert mirror.requests == [("GET", "/jpg1.tar.gz", f"bytes={size // 2}-")]
    assert dest.read_bytes() == served.read_bytes() and not part.exists()


@pytest.mark.parametrize(
    "name, problem",
    [
        ("../escaped.tar.gz", "is not a file name; name the archive, as jpg1.tar.gz"),
        ("jpg1.tar.gz", "names two archives; give each archive its own name"),
    ],
)
def test_archive_names_are_file_names_each_its_own(tmp_path, name, problem):
    archives = [
        {"name": "jpg1.tar.gz", "urls": ["http://127.0.0.1:9/a"]},
        {"name": name, "urls": ["http://127.0.0.1:9/b"]},
    ]
    with pytest.raises(ConfigError) as refused:
        fetch_dataset(
            archives,
            tmp_path / "data/archives",
            tmp_path / "data/images",
            tmp_path / "data/download.json",
            inside="jpg",
            kind="holidays",
            n_images=12,
            n_groups=4,
            sha256={},
            progress=False,
        )
    assert str(refused.value) == f"download.holidays.archives[1].name: {name!r} {problem}"
    assert list(tmp_path.iterdir()) == []


def validated_download(kind):
    """``download.<kind>`` of config.yaml, validated (defaults filled in) by the schema."""
    import yaml
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    validate(config, str(REPO / "workflow/schemas/config.schema.yaml"))
    return copy.deepcopy(config["download"][kind])


def test_the_default_holidays_urls_try_inria_s_current_host_then_its_ftp_server():
    archives = validated_download("holidays")["archives"]
    assert [archive["name"] for archive in archives] == ["jpg1.tar.gz", "jpg2.tar.gz"]
    for archive in archives:
        assert [url.rsplit("/", 1) for url in archive["urls"]] == [
            ["http://pascal.inrialpes.fr/data2/holidays", archive["name"]],
            ["ftp://ftp.inrialpes.fr/pub/lear/douze/data", archive["name"]],
        ]
    assert [archive["name"] for archive in validated_download("ukbench")["archives"]] == ["ukbench.zip"]


def test_the_stage_fetches_the_archives_of_the_config_s_download_section(tmp_path):
    """The rule passes ``download.<kind>`` of the config as ``source``: the stage reads
    the schema's shape (here the default archives, their URLs pointed at 127.0.0.1)."""
    from ndir.stages.data import fetch_dataset as stage

    served = ukbench_zip(tmp_path / "served")
    source = validated_download("ukbench")
    with http_server(tmp_path / "served") as server:
        source["archives"][0]["urls"] = [f"http://127.0.0.1:{closed_port()}/ukbench.zip", f"{server.url}/ukbench.zip"]
        source.update(n_images=12, n_groups=3, sha256={"ukbench.zip": sha256(served)})
        root = tmp_path / "data"
        stage(root / "images", root / "download.json", root / "archives", "ukbench", source)
    record = json.loads((root / "download.json").read_text())
    assert record == [
        {
            "file": str(root / "archives/ukbench.zip"),
            "url": f"{server.url}/ukbench.zip",
            "bytes": served.stat().st_size,
            "sha256": sha256(served),
        }
    ]
    assert len(list((root / "images").iterdir())) == 12


def test_a_pin_is_named_by_its_exact_key_for_an_archive_already_there(tmp_path):
    served = ukbench_zip(tmp_path / "served")
    root = tmp_path / "data"
    (root / "archives").mkdir(parents=True)
    (root / "archives/ukbench.zip").write_bytes(served.read_bytes())
    wrong = "a" * 64
    with pytest.raises(DownloadError) as refused:
        fetch(
            ["http://127.0.0.1:9/ukbench.zip"],
            root,
            kind="ukbench",
            inside="full",
            n_groups=3,
            pins={"ukbench.zip": wrong},
        )
    assert str(refused.value) == (
        f"{root / 'archives/ukbench.zip'}: its SHA-256 is {sha256(served)}, not the {wrong} pinned in "
        'download.ukbench.sha256["ukbench.zip"]; delete it to download it again, or correct the pin'
    )


# --------------------------------------------------------------------------- damaged archives


def damaged(path, how, name):
    """A copy of the archive ``path`` named ``name`` beside it: its end cut off (``cut``),
    its first 64 bytes zeroed (``head``) or 200 bytes in its middle scrambled (``middle``)."""
    data = bytearray(path.read_bytes())
    if how == "cut":
        data = data[: len(data) * 2 // 3]
    elif how == "head":
        data[:64] = bytes(64)
    else:
        middle = len(data) // 2
        data[middle : middle + 200] = bytes(range(200))
    copy_path = path.with_name(name)
    copy_path.write_bytes(bytes(data))
    return copy_path


def fix_for(archive):
    return (
        f"delete it and run the workflow again, or download it by hand to {archive}, or set dataset.path to a folder "
        "of the unpacked images"
    )


@pytest.mark.parametrize(
    "how, name",
    [("cut", "ukbench.zip"), ("cut", "ukbench.data"), ("head", "ukbench.zip"), ("middle", "ukbench.zip")],
)
def test_a_damaged_zip_is_named_a_damaged_zip(tmp_path, how, name):
    """Its central directory cut off (is_zipfile says no) it is known by its first bytes,
    whatever its name; its first bytes damaged, by its name."""
    archive = damaged(ukbench_zip(tmp_path / "served"), how, name)
    with pytest.raises(DownloadError) as refused:
        unpack_images([archive], tmp_path / "images", "full", "ukbench", 12, 3)
    message = str(refused.value)
    assert message.startswith(f"{archive}: a damaged zip archive, cut short or corrupted (")
    assert message.endswith(f"); {fix_for(archive)}")
    assert not (tmp_path / "images").exists()


@pytest.mark.parametrize("how, name", [("cut", "jpg1.tar.gz"), ("cut", "jpg1.data"), ("middle", "jpg1.tar.gz")])
def test_a_damaged_tar_gz_is_named_a_damaged_gzip_tar_archive(tmp_path, how, name):
    archive = damaged(holidays_archives(tmp_path / "served")[0], how, name)
    with pytest.raises(DownloadError) as refused:
        unpack_images([archive], tmp_path / "images", "jpg", "holidays", 6, 2)
    message = str(refused.value)
    assert message.startswith(f"{archive}: a damaged gzip/tar archive, cut short or corrupted (")
    assert message.endswith(f"); {fix_for(archive)}")
    assert not (tmp_path / "images").exists()


def test_a_file_of_no_archive_format_is_named_so(tmp_path):
    archive = tmp_path / "jpg1.data"
    archive.write_bytes(b"\x00\x01 neither zip nor tar " * 40)
    with pytest.raises(DownloadError) as refused:
        unpack_images([archive], tmp_path / "images", "jpg", "holidays", 6, 2)
    message = str(refused.value)
    assert message.startswith(f"{archive}: not a zip or tar archive, or a damaged one (")
    assert message.endswith(f"); {fix_for(archive)}")


def test_a_full_disk_while_unpacking_is_not_called_a_damaged_archive(tmp_path, monkeypatch):
    """An error writing an image (ENOSPC) propagates as it is: the archive is sound."""
    archive = ukbench_zip(tmp_path / "served")

    class FullDisk:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def no_space(path, mode="r", *args, **kwargs):
        return FullDisk() if "w" in mode else open(path, mode, *args, **kwargs)

    monkeypatch.setattr(ndir.download, "open", no_space, raising=False)
    with pytest.raises(OSError) as full:
        unpack_images([archive], tmp_path / "images", "full", "ukbench", 12, 3)
    assert full.value.errno == errno.ENOSPC and not isinstance(full.value, DownloadError)
    assert not (tmp_path / "images").exists()


# --------------------------------------------------------------------------- modes


@pytest.mark.parametrize(
    "umask, folder_mode, file_mode", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600)], ids=["umask 022", "umask 077"]
)
def test_what_a_fetch_writes_gets_the_modes_of_the_users_umask(tmp_path, umask, folder_mode, file_mode):
    """The images folder and the record are made by atomic_folder and atomic_output
    (private temporary files), the archive by open(): each ends as mkdir and open()
    would have made it."""
    holidays_archives(tmp_path / "served")
    root = tmp_path / "data"
    previous = os.umask(umask)
    try:
        with http_server(tmp_path / "served") as server:
            fetch([f"{server.url}/jpg{part}.tar.gz" for part in (1, 2)], root)
    finally:
        os.umask(previous)
    modes = {
        path: stat.S_IMODE(path.stat().st_mode)
        for path in (root / "images", root / "download.json", root / "archives/jpg1.tar.gz", root / "images/100000.jpg")
    }
    assert modes == {
        root / "images": folder_mode,
        root / "download.json": file_mode,
        root / "archives/jpg1.tar.gz": file_mode,
        root / "images/100000.jpg": file_mode,
    }
