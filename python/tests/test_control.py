"""A process's controls: signals, terminal size, the session's process list — Tether
extensions where the reference has none, refused there before anything is sent."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import tether
from conftest import fifo, read_fifo


def test_sigterm_reaches_the_command_on_tether(tether_server, fifo_dir):
    ready = fifo(fifo_dir, "ready")
    with tether.connect(tether_server.url) as ex:
        p = ex.spawn(
            ["sh", "-c", f"trap 'echo got-term; exit 7' TERM; echo up > {ready}; while :; do sleep 0.05; done"]
        )
        assert read_fifo(ready) == "up\n"
        p.terminate()
        # The whole group hears it: the shell's `sleep` too, which the shell reports on
        # stderr.
        out, _ = p.communicate()
        assert p.returncode == 7
    assert out == b"got-term\n"


def test_sigint_reaches_the_command_on_both(server, fifo_dir):
    ready = fifo(fifo_dir, "ready")
    with tether.connect(server.url) as ex:
        p = ex.spawn(
            ["sh", "-c", f"trap 'echo got-int; exit 8' INT; echo up > {ready}; while :; do sleep 0.05; done"]
        )
        assert read_fifo(ready) == "up\n"
        p.send_signal(signal.SIGINT)
        assert p.communicate() == (b"got-int\n", b"")
        assert p.returncode == 8


def test_other_signals_are_refused_unsent_by_the_reference(reference_server, fifo_dir):
    ready = fifo(fifo_dir, "ready")
    with tether.connect(reference_server.url) as ex:
        p = ex.spawn(["sh", "-c", f"echo up > {ready}; exec sleep 600"])
        assert read_fifo(ready) == "up\n"
        with pytest.raises(tether.UnsupportedError):
            p.send_signal(signal.SIGTERM)
        with pytest.raises(tether.UnsupportedError):
            ex.processes()
        # terminate() falls back to a kill where SIGTERM cannot be sent.
        p.terminate()
        p.wait()
        assert p.returncode is not None


def test_a_terminal_of_the_size_asked_and_resized(tether_server, fifo_dir):
    resized = fifo(fifo_dir, "resized")
    with tether.connect(tether_server.url) as ex:
        p = ex.spawn(
            ["sh", "-c", f"stty size; read line < {resized}; stty size"],
            tty=True,
            pty_size=(100, 30),
        )
        first = next(iter(p)).data
        assert first.strip() == b"30 100"
        p.resize(120, 40)
        with open(resized, "w") as go:
            go.write("x\n")
        rest = b"".join(o.data for o in p)
    assert rest.strip() == b"40 120"


def test_the_session_lists_its_processes_on_tether(tether_server):
    with tether.connect(tether_server.url) as ex:
        p = ex.spawn(["sh", "-c", "exit 3"])
        assert p.wait() == 3
        listed = {entry["processId"]: entry for entry in ex.processes()}
    assert p.process_id in listed


def test_a_closed_executor_refuses_calls(server):
    ex = tether.connect(server.url)
    ex.close()
    with pytest.raises(ValueError, match="closed"):
        ex.run(["true"])
