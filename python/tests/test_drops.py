"""A network that keeps dropping: the client resumes underneath, and the caller sees every
byte once, in order."""

from __future__ import annotations

import asyncio
import hashlib
import resource

import pytest

import tether
from conftest import CuttingProxy

# About 6 MB, written over about 3 s: long enough to meet a dozen cuts.
PACED_SCRIPT = (
    "i=0; while [ $i -lt 60 ]; do seq $((i * 20000 + 1)) $((i * 20000 + 20000)); "
    "i=$((i + 1)); sleep 0.05; done"
)


def paced_expected() -> bytes:
    return b"".join(b"%d\n" % n for n in range(1, 60 * 20000 + 1))


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
            collected = ex.spawn(["sh", "-c", PACED_SCRIPT])
            proxy.start_cutting()
            out, _ = collected.communicate()
            # One at a time, as the reference retains only so much of a process nobody reads.
            proxy.stop_cutting()
            p = ex.spawn(["sh", "-c", PACED_SCRIPT])
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


def test_async_streams_survive_the_same_cuts(server):
    proxy = CuttingProxy(server_port(server), period=0.2, cutting=False)

    async def main():
        async with tether.aio.connect(proxy.url) as ex:
            processes = [await ex.spawn(["sh", "-c", PACED_SCRIPT]) for _ in range(3)]
            proxy.start_cutting()
            return await asyncio.gather(*(p.communicate() for p in processes))

    try:
        results = asyncio.run(main())
        assert proxy.cuts >= 5
    finally:
        proxy.close()
    expected = hashlib.sha256(paced_expected()).hexdigest()
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
