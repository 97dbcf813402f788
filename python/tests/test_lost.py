"""A process that can no longer be followed raises ``tether.ProcessLost``, whose ``kind`` and
``server_went_away`` say why, so a program decides what to do without reading the message."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import tether
from conftest import fifo


def test_a_server_that_stops_under_a_command_is_said_to_have_gone_away(tether_server, fifo_dir):
    """Stopped with SIGTERM, Tether ends its commands and says it is going away (a WebSocket
    close 1001): the client gives up in seconds, and the process's failure says the server went
    away — there is no session left to take up again."""
    ready = fifo(fifo_dir, "ready")
    with tether.connect(tether_server.url) as ex:
        p = ex.spawn(["sh", "-c", f"echo up > {ready}; exec sleep 600"])
        assert Path(ready).read_text() == "up\n"
        tether_server.stop()
        with pytest.raises(tether.ProcessLost) as raised:
            p.wait()
    assert raised.value.kind == "session_lost"
    assert raised.value.server_went_away is True


def test_a_server_that_vanishes_leaves_a_session_lost_without_going_away(tether_server, fifo_dir):
    """Killed outright, the server says nothing: the client tries to resume until its recovery
    time is up, then gives the session up — lost, but not said to have gone away, so a program
    would offer to take it up again."""
    ready = fifo(fifo_dir, "ready")
    with tether.connect(tether_server.url, recovery_timeout=0.5) as ex:
        p = ex.spawn(["sh", "-c", f"echo up > {ready}; exec sleep 600"])
        assert Path(ready).read_text() == "up\n"
        # The serving process alone: its guardian stays to end what it started.
        os.kill(serving_pid(tether_server.process.pid), signal.SIGKILL)
        tether_server.process.wait()
        with pytest.raises(tether.ProcessLost) as raised:
            p.wait()
    assert raised.value.kind == "session_lost"
    assert raised.value.server_went_away is False


def test_the_packages_own_process_lost_has_a_kind():
    """Raised by the package's Python code too (a close without an exit code)."""
    lost = tether.ProcessLost("process p closed without an exit code", kind="protocol")
    assert (lost.kind, lost.server_went_away) == ("protocol", False)


def serving_pid(guardian: int) -> int:
    """The serving process under Tether's guardian: its one child."""
    children = Path(f"/proc/{guardian}/task/{guardian}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])
