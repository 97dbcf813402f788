"""``Executor.run``, ``spawn`` and files, blocking, against both servers."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tether
from conftest import fifo, read_fifo

# 20 MiB of a pattern both sides can make: a line number on every line, so a byte out of place
# or lost shows.
STREAM_LINES = 2_500_000
STREAM_SCRIPT = f"seq 1 {STREAM_LINES}"


def expected_stream() -> bytes:
    return b"".join(b"%d\n" % n for n in range(1, STREAM_LINES + 1))


def test_exit_code_and_streams_apart(server):
    with tether.connect(server.url) as ex:
        r = ex.run(["sh", "-c", "echo hi; echo oops >&2; exit 3"], cwd="/tmp", env={"A": "1"})
    assert isinstance(r, tether.CompletedProcess)
    assert (r.returncode, r.stdout, r.stderr) == (3, b"hi\n", b"oops\n")
    assert r.args == ["sh", "-c", "echo hi; echo oops >&2; exit 3"]


def test_cwd_and_env_are_the_commands(server):
    with tether.connect(server.url) as ex:
        r = ex.run(["sh", "-c", 'echo "$A:$HOME"; pwd'], cwd="/usr", env={"A": "1"})
        inherited = ex.run(["sh", "-c", 'echo "$PATH"'])
    # env= is the whole environment, as subprocess's is: HOME is not inherited.
    assert r.stdout == b"1:\n/usr\n"
    assert inherited.stdout.strip() != b""


def test_check_raises_called_process_error(server):
    with tether.connect(server.url) as ex:
        with pytest.raises(tether.CalledProcessError) as raised:
            ex.run(["sh", "-c", "echo out; exit 5"], check=True)
    assert isinstance(raised.value, subprocess.CalledProcessError)
    assert raised.value.returncode == 5
    assert raised.value.stdout == b"out\n"


def test_a_missing_program_is_file_not_found(server):
    with tether.connect(server.url) as ex:
        with pytest.raises(FileNotFoundError) as raised:
            ex.run(["/nonexistent/program"])
    assert raised.value.errno == 2
    assert raised.value.filename == "/nonexistent/program"


def test_text_and_shell(server):
    with tether.connect(server.url) as ex:
        r = ex.run("echo héllo | tr a-z A-Z", shell=True, text=True)
    assert r.stdout == "HéLLO\n"


def test_timeout_kills_the_command_and_keeps_its_output(server):
    with tether.connect(server.url) as ex:
        with pytest.raises(tether.TimeoutExpired) as raised:
            ex.run(["sh", "-c", "echo $$; exec sleep 600"], timeout=0.5)
        expired = raised.value
        assert isinstance(expired, TimeoutError)
        assert isinstance(expired, subprocess.TimeoutExpired)
        assert expired.timeout == 0.5
        pid = int(expired.output)
        # Gone (or a zombie on its way out) soon: a run that waits for that, bounded.
        gone = ex.run(
            ["sh", "-c", f"while kill -0 {pid} 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' /proc/{pid}/stat; do sleep 0.01; done; echo gone"],
            timeout=20,
        )
    assert gone.stdout == b"gone\n"


def test_stdin_is_written_and_closed_on_tether(tether_server):
    with tether.connect(tether_server.url) as ex:
        r = ex.run(["sh", "-c", "wc -c; cat >&2"], input=b"x" * 100_000 + b"end")
    assert r.stdout.strip() == b"100003"


def test_input_on_the_reference_is_refused_before_anything_runs(reference_server, tmp_path):
    marker = tmp_path / "ran"
    with tether.connect(reference_server.url) as ex:
        with pytest.raises(tether.UnsupportedError) as raised:
            ex.run(["sh", "-c", f"touch {marker}; cat"], input=b"x")
    assert "closeStdin" in str(raised.value)
    assert not marker.exists()


def test_spawn_stdin_and_iteration(server):
    with tether.connect(server.url) as ex:
        p = ex.spawn(["sh", "-c", "head -c 5; echo; echo done >&2"], stdin=True)
        p.write(b"hello world")
        outputs = list(p)
        assert p.returncode == 0
        assert p.wait() == 0
    assert all(isinstance(out, tether.Output) for out in outputs)
    assert b"".join(o.data for o in outputs if o.stream == "stdout") == b"hello\n"
    assert b"".join(o.data for o in outputs if o.stream == "stderr") == b"done\n"


def test_twenty_megabytes_arrive_in_order(server):
    with tether.connect(server.url) as ex:
        r = ex.run(["sh", "-c", STREAM_SCRIPT])
        p = ex.spawn(["sh", "-c", STREAM_SCRIPT])
        streamed = b"".join(out.data for out in p)
    expected = expected_stream()
    assert len(expected) > 20_000_000 - 4_000_000
    assert hashlib.sha256(r.stdout).hexdigest() == hashlib.sha256(expected).hexdigest()
    assert hashlib.sha256(streamed).hexdigest() == hashlib.sha256(expected).hexdigest()


def test_a_tty_process(server):
    with tether.connect(server.url) as ex:
        r = ex.run(["sh", "-c", "test -t 1 && echo terminal"], tty=True)
    assert r.stdout.replace(b"\r\n", b"\n") == b"terminal\n"


def test_files_of_ten_megabytes_both_ways(server, tmp_path):
    data = os.urandom(10 * 1024 * 1024)
    target = tmp_path / "up.bin"
    with tether.connect(server.url) as ex:
        ex.write_file(target, data)
        assert target.read_bytes() == data
        source = tmp_path / "down.bin"
        source.write_bytes(data[::-1])
        assert ex.read_file(str(source)) == data[::-1]


def test_a_missing_file_is_file_not_found(server, tmp_path):
    missing = tmp_path / "missing"
    with tether.connect(server.url) as ex:
        with pytest.raises(FileNotFoundError) as raised:
            ex.read_file(missing)
        with pytest.raises(FileNotFoundError):
            ex.write_file(tmp_path / "no-dir" / "f", b"x")
    assert raised.value.filename == str(missing)


def test_nobody_listening_is_a_connection_error():
    free = __import__("socket").socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(tether.ConnectError) as raised:
        tether.connect(f"ws://127.0.0.1:{port}")
    assert isinstance(raised.value, ConnectionError)
    assert raised.value.kind == "network"


def test_a_refused_token_says_so(tmp_path):
    from conftest import start

    token_file = tmp_path / "token"
    token_file.write_text("right-token\n")
    server = start("tether", "--ws-auth", "capability-token", "--ws-token-file", str(token_file))
    try:
        with pytest.raises(tether.ConnectError) as raised:
            tether.connect(server.url, token="wrong-token")
        assert (raised.value.kind, raised.value.status) == ("refused", 401)
        calls = []

        def token() -> str:
            calls.append(1)
            return "right-token"

        with tether.connect(server.url, token=token) as ex:
            assert ex.run(["true"]).returncode == 0
        assert calls == [1]
    finally:
        server.stop()


def test_ctrl_c_in_a_blocking_run_interrupts_the_remote_command(server, fifo_dir):
    started, interrupted = fifo(fifo_dir, "started"), fifo(fifo_dir, "interrupted")
    program = textwrap.dedent(
        f"""
        import signal
        import tether
        # Ctrl-C as a terminal gives it, whatever this test's own caller set (a shell's
        # background job starts with SIGINT ignored, and a child inherits that).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with tether.connect({server.url!r}) as ex:
            # Time enough for the trap on a loaded machine: the kill must not win.
            ex.run(["sh", "-c", "trap 'echo got-int > {interrupted}; exit 9' INT; echo up > {started}; while :; do sleep 0.05; done"], interrupt_grace=600)
        """
    )
    caller = subprocess.Popen([sys.executable, "-c", program], stderr=subprocess.PIPE)
    try:
        # The command is running once it has written here.
        assert read_fifo(started) == "up\n"
        caller.send_signal(signal.SIGINT)
        # …and it was interrupted once it writes here.
        assert read_fifo(interrupted) == "got-int\n"
        _, err = caller.communicate(timeout=30)
    finally:
        caller.kill()
    assert caller.returncode != 0
    assert b"KeyboardInterrupt" in err


def test_a_session_is_taken_up_again_after_the_program_restarts(server, fifo_dir):
    go = fifo(fifo_dir, "go")
    ex = tether.connect(server.url)
    p = ex.spawn(["sh", "-c", f"echo before; read line < {go}; echo after; exit 4"])
    session_id, process_id = ex.session_id, p.process_id
    assert next(iter(p)).data == b"before\n"
    del p
    ex.close()
    # A new client, as a restarted program would make, with only the two ids.
    with tether.connect(server.url, session_id=session_id) as again:
        assert again.session_id == session_id
        followed = again.attach(process_id)
        with open(go, "w") as release:
            release.write("x\n")
        out = b"".join(o.data for o in followed)
        assert followed.wait() == 4
    assert out.endswith(b"after\n")


def test_a_run_interrupted_before_its_wait_never_starts(server, tmp_path):
    # A Ctrl-C can land after run() has made its call and before it waits for it; the call
    # then must not go on unwatched. Made and dropped without a wait (as such an interrupt
    # leaves it), the command never starts.
    marker = tmp_path / "ran"
    with tether.connect(server.url) as ex:
        command = ["sh", "-c", f"touch {marker}"]
        made = ex._native.run(command, None, None, None, None, False, 0.25)
        del made
        # Assert: a later command runs to its end, and the first never ran.
        assert ex.run(["sh", "-c", "echo later"]).stdout == b"later\n"
        assert not marker.exists()
