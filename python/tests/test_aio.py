"""``tether.aio``: the same calls as coroutines, against both servers."""

from __future__ import annotations

import asyncio
import hashlib
import os
import select
import subprocess
from pathlib import Path

import pytest

import tether
from conftest import FIFO_DEADLINE_SECONDS, fifo, read_fifo
from test_run import STREAM_SCRIPT, expected_stream


def run(coroutine):
    return asyncio.run(coroutine)


def test_run_spawn_and_files(server, tmp_path):
    async def main():
        ex = await tether.aio.connect(server.url)
        async with ex:
            r = await ex.run(["sh", "-c", "echo hi; echo oops >&2; exit 3"], cwd="/tmp")
            assert (r.returncode, r.stdout, r.stderr) == (3, b"hi\n", b"oops\n")
            p = await ex.spawn(["sh", "-c", "echo a; echo b >&2"])
            outputs = [out async for out in p]
            assert await p.wait() == 0
            assert sorted(o.data for o in outputs) == [b"a\n", b"b\n"]
            data = os.urandom(10 * 1024 * 1024)
            await ex.write_file(tmp_path / "f", data)
            assert await ex.read_file(tmp_path / "f") == data
            with pytest.raises(FileNotFoundError):
                await ex.read_file(tmp_path / "missing")
            with pytest.raises(tether.CalledProcessError):
                await ex.run(["false"], check=True)
            with pytest.raises(FileNotFoundError):
                await ex.spawn(["/nonexistent/program"])

    run(main())


def concurrent_runs(url: str, count: int) -> None:
    async def main():
        async with tether.aio.connect(url) as ex:
            results = await asyncio.gather(
                *(ex.run(["sh", "-c", f"echo {n}; exit {n % 7}"]) for n in range(count))
            )
        for n, r in enumerate(results):
            assert (r.returncode, r.stdout) == (n % 7, b"%d\n" % n)

    run(main())


def test_a_thousand_concurrent_runs_on_one_connection(tether_server):
    concurrent_runs(tether_server.url, 1000)


def test_concurrent_runs_on_both(server):
    # The reference serves one request at a time per connection: past a few hundred starts
    # queued on it, its answers (and pongs) wait longer than the client's liveness deadline.
    concurrent_runs(server.url, 150)


def test_twenty_megabytes_stream_in_order(server):
    async def main():
        async with tether.aio.connect(server.url) as ex:
            p = await ex.spawn(["sh", "-c", STREAM_SCRIPT])
            digest = hashlib.sha256()
            async for out in p:
                digest.update(out.data)
            assert await p.wait() == 0
            return digest.hexdigest()

    assert run(main()) == hashlib.sha256(expected_stream()).hexdigest()


def test_cancelling_a_run_interrupts_the_remote_command(server, fifo_dir):
    started, interrupted = fifo(fifo_dir, "started"), fifo(fifo_dir, "interrupted")

    async def main():
        async with tether.aio.connect(server.url) as ex:
            task = asyncio.ensure_future(
                ex.run(
                    [
                        "sh",
                        "-c",
                        f"trap 'echo got-int > {interrupted}; exit 9' INT; echo up > {started}; while :; do sleep 0.05; done",
                    ],
                    # Time enough for the trap on a loaded machine: the kill must not win.
                    interrupt_grace=600,
                )
            )
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, read_fifo, started) == "up\n"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The command heard SIGINT: its trap writes here.
            assert await loop.run_in_executor(None, read_fifo, interrupted) == "got-int\n"

    run(main())


def test_a_cancelled_run_that_ignores_sigint_is_killed_after_its_grace(server, fifo_dir):
    started = fifo(fifo_dir, "started")

    async def main():
        async with tether.aio.connect(server.url) as ex:
            task = asyncio.ensure_future(
                ex.run(["sh", "-c", f"trap '' INT; echo $$ > {started}; exec sleep 600"])
            )
            loop = asyncio.get_running_loop()
            pid = int(await loop.run_in_executor(None, read_fifo, started))
            # The executor runs here: its command's end is seen through a pidfd.
            pidfd = os.pidfd_open(pid)
            try:
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                # SIGINT changes nothing; the kill that follows 0.25 s later ends it.
                ended = await loop.run_in_executor(
                    None, lambda: select.select([pidfd], [], [], FIFO_DEADLINE_SECONDS)[0]
                )
                assert ended, f"the command (pid {pid}) was never killed"
            finally:
                os.close(pidfd)

    run(main())


def test_a_wait_given_up_loses_no_output(server, fifo_dir):
    go = fifo(fifo_dir, "go")

    async def main():
        async with tether.aio.connect(server.url) as ex:
            p = await ex.spawn(["sh", "-c", f"read line < {go}; echo late; exit 2"])
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(p.__anext__(), timeout=0.2)
            with open(go, "w") as release:
                release.write("x\n")
            outputs = [out async for out in p]
            assert outputs == [tether.Output("stdout", b"late\n")]
            assert await p.wait() == 2

    run(main())
