"""The Python SDK against a raw Python WebSocket client, on the same server in the same run.

    python python/bench/bench.py [--tether target/release/tether] [--rounds 5]

Two workloads, as the package promises them: 1,000 sequential ``run(["true"])`` and a 200 MB
stream (``head -c 200000000 /dev/zero``) read to its end. The raw client is what a Python
program without the SDK writes: JSON-RPC over the ``websockets`` library's synchronous client,
each output chunk's base64 decoded. Each round runs both clients on a fresh server, alternating
which goes first; the table gives the median and the spread (min–max) of the rounds, and the
ratio of the medians. The floor is the workload with no server and no client (``/bin/true``
spawned and waited for by this process, the stream read straight from its pipe): raw ÷ floor
is the most any client, however fast, could gain over the raw one on this machine. Needs ``pip install websockets`` and the package installed (build it
with ``maturin develop --release`` for figures worth comparing).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import tether

ROOT = Path(__file__).resolve().parents[2]
RUNS = 1000
STREAM_BYTES = 200_000_000


class Raw:
    """A minimal exec-server client: one request at a time, notifications read in line."""

    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(url, max_size=None, compression=None)
        self.next_id = 0
        self.call("initialize", {"clientName": "raw-bench"})
        self.ws.send(json.dumps({"method": "initialized", "params": {}}))

    def call(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(message["error"])
                return message["result"]
            self.notified(message)

    def notified(self, message: dict) -> None:
        pass

    def run(self, argv: List[str], process_id: str) -> int:
        """Starts ``argv`` and reads its notifications to ``process/closed``: the bytes of
        output."""
        received = 0
        closed = False

        def notified(message: dict) -> None:
            nonlocal received, closed
            params = message.get("params", {})
            if params.get("processId") != process_id:
                return
            if message["method"] == "process/output":
                received += len(base64.b64decode(params["chunk"]))
            elif message["method"] == "process/closed":
                closed = True

        self.notified = notified  # type: ignore[method-assign]
        self.call(
            "process/start",
            {"processId": process_id, "argv": argv, "cwd": "file:///", "env": {"PATH": os.environ["PATH"]},
             "tty": False, "pipeStdin": False},
        )
        while not closed:
            notified(json.loads(self.ws.recv()))
        return received

    def close(self) -> None:
        self.ws.close()


def sdk_runs(url: str) -> float:
    with tether.connect(url) as ex:
        started = time.perf_counter()
        for _ in range(RUNS):
            ex.run(["true"], env={"PATH": os.environ["PATH"]}, cwd="/")
        return time.perf_counter() - started


def raw_runs(url: str) -> float:
    raw = Raw(url)
    started = time.perf_counter()
    for n in range(RUNS):
        raw.run(["true"], f"raw-{n}")
    elapsed = time.perf_counter() - started
    raw.close()
    return elapsed


def sdk_stream(url: str) -> float:
    with tether.connect(url) as ex:
        started = time.perf_counter()
        p = ex.spawn(["head", "-c", str(STREAM_BYTES), "/dev/zero"], env={"PATH": os.environ["PATH"]}, cwd="/")
        received = sum(len(out.data) for out in p)
        elapsed = time.perf_counter() - started
    assert received == STREAM_BYTES, received
    return elapsed


def raw_stream(url: str) -> float:
    raw = Raw(url)
    started = time.perf_counter()
    received = raw.run(["head", "-c", str(STREAM_BYTES), "/dev/zero"], "raw-stream")
    elapsed = time.perf_counter() - started
    raw.close()
    assert received == STREAM_BYTES, received
    return elapsed


def floor_runs(_url: str) -> float:
    started = time.perf_counter()
    for _ in range(RUNS):
        pid = os.posix_spawnp("true", ["true"], os.environ)
        os.waitpid(pid, 0)
    return time.perf_counter() - started


def floor_stream(_url: str) -> float:
    started = time.perf_counter()
    child = subprocess.Popen(["head", "-c", str(STREAM_BYTES), "/dev/zero"], stdout=subprocess.PIPE)
    assert child.stdout is not None
    received = 0
    while chunk := os.read(child.stdout.fileno(), 1 << 20):
        received += len(chunk)
    child.wait()
    elapsed = time.perf_counter() - started
    assert received == STREAM_BYTES, received
    return elapsed


def serve(binary: str) -> subprocess.Popen:
    server = subprocess.Popen(
        [binary, "serve", "--listen", "ws://127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdout is not None
    server.url = server.stdout.readline().decode().strip()  # type: ignore[attr-defined]
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tether", default=str(ROOT / "target/release/tether"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    workloads: Dict[str, Dict[str, Callable[[str], float]]] = {
        f"{RUNS} sequential run(['true'])": {"sdk": sdk_runs, "raw": raw_runs, "floor": floor_runs},
        "200 MB stream": {"sdk": sdk_stream, "raw": raw_stream, "floor": floor_stream},
    }
    print(f"tether-client {tether.__name__} against a raw websockets client; server {args.tether}")
    print(f"{args.rounds} rounds, a fresh server each, alternating order\n")
    print(
        "| workload | SDK (s, median, min–max) | raw (s, median, min–max) | SDK speed-up "
        "| floor (s, median, min–max) | raw ÷ floor |"
    )
    print("|---|---|---|---|---|---|")
    for name, clients in workloads.items():
        times: Dict[str, List[float]] = {"sdk": [], "raw": [], "floor": []}
        for round_ in range(args.rounds):
            order = ["sdk", "raw", "floor"] if round_ % 2 == 0 else ["floor", "raw", "sdk"]
            for client in order:
                server = serve(args.tether)
                try:
                    times[client].append(clients[client](server.url))  # type: ignore[attr-defined]
                finally:
                    server.terminate()
                    server.wait()
        sdk, raw, floor = (statistics.median(times[client]) for client in ("sdk", "raw", "floor"))
        print(
            f"| {name} | {sdk:.3f} ({min(times['sdk']):.3f}–{max(times['sdk']):.3f}) "
            f"| {raw:.3f} ({min(times['raw']):.3f}–{max(times['raw']):.3f}) | {raw / sdk:.1f}× "
            f"| {floor:.3f} ({min(times['floor']):.3f}–{max(times['floor']):.3f}) | {raw / floor:.1f}× |"
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
