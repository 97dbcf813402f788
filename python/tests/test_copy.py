"""``Executor.upload`` and ``download``: files and trees up and down as scp copies them
(the copier ``tether cp`` uses), blocking and async, against both servers. Both sides are
this machine: "here" and "there" are two directories of the test's own."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Dict

import pytest

import tether

# Bigger than one block (1 MiB), so that it is streamed in blocks, not put whole.
BIG = bytes((i * 7) % 251 for i in range(3_500_000))

# Long enough that a copy is still under way when the test cancels it.
HUGE_BYTES = 2_000_000_000


def make_tree(root: Path) -> None:
    (root / "bin").mkdir(parents=True)
    (root / "big.bin").write_bytes(BIG)
    (root / "bin" / "run.sh").write_bytes(b"#!/bin/sh\necho run\n")
    (root / "bin" / "run.sh").chmod(0o755)
    (root / "empty").write_bytes(b"")
    (root / "nothing-here").mkdir()
    (root / "link").symlink_to("bin/run.sh")


def files_under(root: Path) -> Dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def staged_under(root: Path) -> list:
    return [path.name for path in root.rglob("*") if ".tether-" in path.name]


def test_a_tree_goes_up_and_comes_back_down(server, tmp_path):
    # Setup: a tree here, an empty directory there.
    here, there, back = tmp_path / "here", tmp_path / "there", tmp_path / "back"
    make_tree(here / "project")
    there.mkdir()

    # Exercise: the tree up into the directory there, then down again under a new name.
    with tether.connect(server.url) as ex:
        up = ex.upload(here / "project", there, recursive=True)
        down = ex.download(there / "project", back, recursive=True)

    # Assert: every byte both ways, and the reports say what was copied and kept.
    assert files_under(there / "project") == files_under(here / "project")
    assert files_under(back) == files_under(here / "project")
    assert (back / "nothing-here").is_dir()
    assert isinstance(up, tether.CopyReport)
    assert (up.files, up.directories, up.bytes) == (3, 3, len(BIG) + 19)
    if server.kind == "tether":
        assert up.whole and down.whole, (up, down)
        assert os.readlink(back / "link") == "bin/run.sh"
        assert (back / "bin" / "run.sh").stat().st_mode & 0o777 == 0o755
    else:
        # The reference keeps no modes, times or links: the copy says so.
        assert (up.links_skipped, up.whole) == (1, False)
        assert not (there / "project" / "link").exists()
    assert staged_under(tmp_path) == []


def test_a_file_goes_into_a_directory_or_onto_a_name(server, tmp_path):
    (tmp_path / "inbox").mkdir()
    (tmp_path / "notes.txt").write_bytes(b"notes\n")
    with tether.connect(server.url) as ex:
        ex.upload(tmp_path / "notes.txt", tmp_path / "inbox")
        ex.download(tmp_path / "inbox" / "notes.txt", tmp_path / "renamed.txt")
    assert (tmp_path / "inbox" / "notes.txt").read_bytes() == b"notes\n"
    assert (tmp_path / "renamed.txt").read_bytes() == b"notes\n"


def test_refusals_are_pythons_own_exceptions(server, tmp_path):
    # Setup: a directory, a file, and a link where a copy would make a directory.
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "src" / "x").mkdir(parents=True)
    (tmp_path / "src" / "x" / "pwned").write_bytes(b"pwned\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "into" / "src").mkdir(parents=True)
    (tmp_path / "into" / "src" / "x").symlink_to(tmp_path / "outside")

    with tether.connect(server.url) as ex:
        with pytest.raises(FileNotFoundError) as missing:
            ex.upload(tmp_path / "missing", tmp_path / "dir")
        with pytest.raises(IsADirectoryError):
            ex.upload(tmp_path / "dir", tmp_path / "elsewhere")
        with pytest.raises(NotADirectoryError):
            ex.upload(tmp_path / "dir", tmp_path / "file", recursive=True)
        with pytest.raises(FileNotFoundError):
            ex.download(tmp_path / "file", tmp_path / "absent" / "new")
        with pytest.raises(ValueError):
            ex.upload(tmp_path / "file", "relative/path")
        with pytest.raises(tether.CopyError) as through:
            ex.upload(tmp_path / "src", tmp_path / "into", recursive=True)

    assert missing.value.filename == str(tmp_path / "missing")
    assert through.value.kind == "through_link"
    assert list((tmp_path / "outside").iterdir()) == [], "nothing written through the link"
    assert (tmp_path / "file").read_bytes() == b"x"


def test_async_upload_and_download(server, tmp_path):
    async def main():
        async with tether.aio.connect(server.url) as ex:
            make_tree(tmp_path / "here")
            up = await ex.upload(tmp_path / "here", tmp_path / "there", recursive=True)
            down = await ex.download(tmp_path / "there", tmp_path / "back", recursive=True)
            with pytest.raises(FileNotFoundError):
                await ex.download(tmp_path / "missing", tmp_path / "back")
            return up, down

    up, down = asyncio.run(main())

    assert files_under(tmp_path / "back") == files_under(tmp_path / "here")
    assert up.files == down.files == 3


def test_a_cancelled_upload_leaves_nothing_behind(server, tmp_path):
    # Setup: a file big enough that its copy is under way for a while.
    source = tmp_path / "huge.bin"
    with open(source, "wb") as huge:
        huge.truncate(HUGE_BYTES)
    there = tmp_path / "there"
    there.mkdir()

    async def main():
        async with tether.aio.connect(server.url) as ex:
            copying = asyncio.ensure_future(ex.upload(source, there / "huge.bin"))
            # Exercise: cancelled once its staged file holds some bytes.
            while not any(path.stat().st_size > 0 for path in there.iterdir()):
                assert not copying.done()
                await asyncio.sleep(0.005)
            copying.cancel()
            with pytest.raises(asyncio.CancelledError):
                await copying
            # The copy removes its staged file as it stops, on the runtime's side.
            for _ in range(6000):
                if not list(there.iterdir()):
                    break
                await asyncio.sleep(0.005)

    asyncio.run(main())

    # Assert: neither the final name nor a staged one is left.
    assert list(there.iterdir()) == []
