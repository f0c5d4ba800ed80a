"""Fetching Holidays and UKBench (ndir.download) from servers on 127.0.0.1 serving small
archives in their layouts: downloads, resumes, checks, and each failure's one line."""

import contextlib
import hashlib
import io
import json
import socket
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

from ndir.download import DownloadError, download, fetch_dataset, unpack_images

from .conftest import import_or_skip
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


def fetch(urls, root, kind="holidays", inside="jpg", n_images=12, n_groups=4, pins=None):
    return fetch_dataset(
        urls,
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
    # The archives are kept: a second fetch downloads nothing.
    with http_server(tmp_path / "served") as server:
        (root / "images").rename(tmp_path / "first")
        fetch([f"{server.url}/{path.name}" for path in served], root)
        assert server.requests == []


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


def test_no_server_and_a_missing_file_are_one_line_with_the_fix(tmp_path):
    root = tmp_path / "data"
    url = f"http://127.0.0.1:{closed_port()}/jpg1.tar.gz"
    with pytest.raises(DownloadError) as offline:
        fetch([url], root)
    dest = root / "archives/jpg1.tar.gz"
    assert str(offline.value) == (
        f"{url}: cannot download (Connection refused); download it by hand to {dest}, or set "
        "dataset.path to a folder of the unpacked images"
    )
    (tmp_path / "served").mkdir()
    with http_server(tmp_path / "served") as server:
        with pytest.raises(
            DownloadError, match=r"jpg1.tar.gz: the server answered HTTP 404 File not found; download it"
        ):
            fetch([f"{server.url}/jpg1.tar.gz"], root)
    assert nothing_left_behind(root)


def test_a_missing_file_on_an_ftp_server_is_named(tmp_path):
    import_or_skip("pyftpdlib", "the FTP test server (pip install pyftpdlib)")
    (tmp_path / "served").mkdir()
    with ftp_server(tmp_path / "served") as url:
        with pytest.raises(DownloadError, match=r"ukbench.zip: the FTP server refused it \(550 .*\); download it by"):
            fetch([f"{url}/ukbench.zip"], tmp_path / "data")


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
        f"{urls[1]}: its SHA-256 is {sha256(served[1])}, not the {wrong} pinned in download.sha256 (moved to "
        f"{rejected}); check the URL (a mirror with other files?) or the pin"
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
    assert str(damaged.value).startswith(f"{archive}: damaged or cut short (")
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
        "download.holidays.urls (another data set, or a mirror that changed it?)"
    )
    assert nothing_left_behind(root)


def test_an_archive_without_the_image_folder_is_named(tmp_path):
    archive = ukbench_zip(tmp_path)
    with pytest.raises(DownloadError, match=rf"{archive}: no image in a folder jpg/ of the archive"):
        unpack_images([archive], tmp_path / "images", "jpg", "ukbench", 12, 3)
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
        download = {"folder": "downloads", kind: {"urls": urls, "n_images": n_images, "n_groups": n_groups}}
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
    served = holidays_archives(tmp_path / "served")[0]
    dest = tmp_path / "archives" / served.name
    dest.parent.mkdir()
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(served.read_bytes()[:100])
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
        "download.sha256; delete it to download it again, or correct the pin"
    )
    assert nothing_left_behind(root)
