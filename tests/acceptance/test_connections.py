"""Connection hygiene: an answer given before the request body was read drains that
body, so its bytes never stall the next request on a keep-alive connection."""

from __future__ import annotations

import httpx
import trio

from tests.support.plane import ALPHA_TOKEN

BODY = b'{"message":{"messageId":"k-1","role":"ROLE_USER","parts":[{"text":"hi"}]}}'


def _request(token: bytes, body: bytes) -> bytes:
    return (
        b"POST /message:send HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
        + token
        + b"\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
    )


async def _read_head(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        data += chunk
    return data


async def test_an_early_error_does_not_stall_the_next_request_on_the_connection(
    live: httpx.AsyncClient,
) -> None:
    port = live.base_url.port
    assert port is not None
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(_request(b"wrong-token", BODY))
            await trio.sleep(0.05)  # the body arrives after the headers (a slow client)
            await stream.send_all(BODY)
            head = await _read_head(stream)
            assert head.startswith(b"HTTP/1.1 401")
            # The same connection serves the next request (the unread body was drained).
            body = BODY.replace(b"k-1", b"k-2")
            await stream.send_all(_request(ALPHA_TOKEN.encode(), body) + body)
            data = b""
            while b'"task"' not in data:
                chunk = await stream.receive_some(65536)
                assert chunk, "the server closed the connection"
                data += chunk
            assert b"HTTP/1.1 200" in data


async def test_keep_alive_still_works_after_a_read_body(live: httpx.AsyncClient) -> None:
    first = await live.post(
        "/message:send",
        json={"message": {"messageId": "ka-1", "role": "ROLE_USER", "parts": [{"text": "a"}]}},
    )
    second = await live.post(
        "/message:send",
        json={"message": {"messageId": "ka-2", "role": "ROLE_USER", "parts": [{"text": "b"}]}},
    )
    assert first.status_code == second.status_code == 200
    assert "close" not in first.headers.get("connection", "")
