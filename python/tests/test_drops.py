"""A network that keeps dropping: the client resumes underneath, and the caller sees every
byte once, in order."""

from __future__ import annotations

import asyncio
import hashlib
import resource

import pytest

import tether
from conftest import CuttingProxy

# Numbers a paced command prints each step, 60 steps 0.05 s apart: about 3 s, long enough to
# meet a dozen cuts. 20,000 a step is about 6 MB in all.
PER_STEP = 20000


def paced_script(per_step: int = PER_STEP) -> str:
    return (
        f"i=0; while [ $i -lt 60 ]; do seq $((i * {per_step} + 1)) $((i * {per_step} + {per_step})); "
        "i=$((i + 1)); sleep 0.05; done"
    )


def paced_expected(per_step: int = PER_STEP) -> bytes:
    return b"".join(b"%d\n" % n for n in range(1, 60 * per_step + 1))


def server_port(server) -> int:
    return int(server.url.rsplit(":", 1)[1])


# The cuts begin once the commands have started: a cut while a start is in flight leaves it
# uncertain whether the command ran, which the client reports (StartUncertain) and ends; that
# is not what these tests are about, and a start is slow enough on the reference for a cut to
# land in it often.


def test_output_is_byte_identical_through_a_connection_cut_every_200ms(server):
    proxy = CuttingProxy(server_port(server), period=0.2, cutting=False)
    try:
        with tether.connect(proxy.url) as ex:
            collected = ex.spawn(["sh", "-c", paced_script()])
            proxy.start_cutting()
            out, _ = collected.communicate()
            # One at a time, as the reference retains only so much of a process nobody reads.
            proxy.stop_cutting()
            p = ex.spawn(["sh", "-c", paced_script()])
            proxy.start_cutting()
            streamed = b"".join(o.data for o in p)
            assert p.wait() == 0
        assert proxy.cuts >= 5
    finally:
        proxy.close()
    expected = hashlib.sha256(paced_expected()).hexdigest()
    assert collected.returncode == 0
    assert hashlib.sha256(out).hexdigest() == expected
    assert hashlib.sha256(streamed).hexdigest() == expected


# Three at once print a quarter as much each: the reference keeps the last 1 MiB of a process
# its client has not read, and three full-rate streams into one asyncio reader on a loaded
# machine left a process unread past that (the client then says so: `ProcessLost`).
CONCURRENT_PER_STEP = PER_STEP // 4


def test_async_streams_survive_the_same_cuts(server):
    proxy = CuttingProxy(server_port(server), period=0.2, cutting=False)
    script = paced_script(CONCURRENT_PER_STEP)

    async def main():
        async with tether.aio.connect(proxy.url) as ex:
            processes = [await ex.spawn(["sh", "-c", script]) for _ in range(3)]
            proxy.start_cutting()
            return await asyncio.gather(*(p.communicate() for p in processes))

    try:
        results = asyncio.run(main())
        assert proxy.cuts >= 5
    finally:
        proxy.close()
    expected = hashlib.sha256(paced_expected(CONCURRENT_PER_STEP)).hexdigest()
    for out, _ in results:
        assert hashlib.sha256(out).hexdigest() == expected


def test_a_slow_reader_holds_a_bounded_amount(tether_server):
    """200 MB read slowly: the process's output waits on the server (or the process waits),
    never in this program's memory."""
    total = 200 * 1024 * 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with tether.connect(tether_server.url) as ex:
        p = ex.spawn(["head", "-c", str(total), "/dev/zero"])
        seen = 0
        for n, out in enumerate(p):
            seen += len(out.data)
            if n % 64 == 0:
                # A reader slower than the stream: the stream runs ahead unless held back.
                __import__("time").sleep(0.01)
        assert p.wait() == 0
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert seen == total
    assert grown < 64 * 1024 * 1024, f"peak memory grew by {grown} bytes"
