"""``Executor.http_request``: HTTP made from the executor's side, against both servers."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

import tether


class Echo(BaseHTTPRequestHandler):
    """Answers with what it was sent; ``/moved`` redirects to ``/there``."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("location", "/there")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        seen = {
            "method": self.command,
            "path": self.path,
            "greeting": self.headers.get("x-greeting"),
            "body": body.decode(),
        }
        data = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("x-echo", "yes")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_requests_with_headers_and_bodies(server, origin):
    with tether.connect(server.url) as ex:
        got = ex.http_request("GET", f"{origin}/a?b=1", headers={"X-Greeting": "hi"})
        posted = ex.http_request("POST", f"{origin}/p", body=b"payload", timeout=10)
        followed = ex.http_request("GET", f"{origin}/moved")
        stopped = ex.http_request("GET", f"{origin}/moved", follow_redirects=False)
    assert got.status == 200
    assert got.json() == {"method": "GET", "path": "/a?b=1", "greeting": "hi", "body": ""}
    assert got.header("X-Echo") == "yes"
    assert posted.json()["body"] == "payload"
    assert followed.json()["path"] == "/there"
    assert (stopped.status, stopped.header("location")) == (302, "/there")


def test_nobody_at_the_origin_is_an_http_request_error(server):
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with tether.connect(server.url) as ex:
        with pytest.raises(tether.HttpRequestError) as raised:
            ex.http_request("GET", f"http://127.0.0.1:{port}/")
        with pytest.raises(tether.HttpRequestError) as invalid:
            ex.http_request("GET", "not a url")
    assert raised.value.kind == "failed"
    assert invalid.value.kind == "invalid"


def test_async_requests(server, origin):
    async def main():
        async with tether.aio.connect(server.url) as ex:
            answers = await asyncio.gather(
                *(ex.http_request("GET", f"{origin}/{n}") for n in range(20))
            )
        return [answer.json()["path"] for answer in answers]

    assert asyncio.run(main()) == [f"/{n}" for n in range(20)]
