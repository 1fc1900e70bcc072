"""A fake ``signal-cli`` for the Signal end-to-end tests: a program speaking
signal-cli's JSON-RPC mode on stdio (``signal-cli -a ACCOUNT jsonRpc``).

It reads one JSON-RPC request a line on stdin and answers on stdout with signal-cli's
shapes: ``version`` → ``{"version": ...}``; ``send`` (``recipient`` or ``groupId``,
``message``, ``quoteTimestamp``, ``quoteAuthor``) → ``{"timestamp": ..., "results":
[{"recipientAddress": ..., "type": "SUCCESS"}]}``; refusals as signal-cli gives them,
an error ``{"code": -1, "message": "Failed to send message", "data": {"response":
{"timestamp": ..., "results": [{"type": "RATE_LIMIT_FAILURE"}]}}}``. Received
messages are ``receive`` notifications (``{"method": "receive", "params": {"envelope":
..., "account": ...}}``), written once each: a message written is gone, as with Signal.

The test drives it through the directory named by ``FAKE_SIGNAL_DIR``:
``inbox/*.json`` (each one envelope, written in name order, then removed), counters
``refuse-sends``, ``rate-limit-sends``, ``network-failure-sends`` (the next N sends
answered so), ``exit`` (present: exit now); it appends what happened to
``starts`` (one line per start), ``requests.jsonl`` and ``sent.jsonl`` (the sends that
succeeded, with their timestamps). It exits when stdin closes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ACCOUNT = "+15550000001"
VERSION = "0.13.22"


class Fake:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.out = threading.Lock()
        self.clock = int(time.time() * 1000)

    def write(self, message: dict[str, Any]) -> None:
        with self.out:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def log(self, name: str, record: dict[str, Any]) -> None:
        with (self.root / name).open("a") as f:
            f.write(json.dumps(record) + "\n")

    def take(self, name: str) -> bool:
        path = self.root / name
        try:
            left = int(path.read_text() or "0")
        except (FileNotFoundError, ValueError):
            return False
        if left <= 0:
            return False
        path.write_text(str(left - 1))
        return True

    def stamp(self) -> int:
        self.clock = max(self.clock + 1, int(time.time() * 1000))
        return self.clock

    def answer(self, request: dict[str, Any]) -> None:
        self.log("requests.jsonl", request)
        method, rid, params = request.get("method"), request.get("id"), request.get("params", {})
        if method == "version":
            self.write({"jsonrpc": "2.0", "result": {"version": VERSION}, "id": rid})
            return
        if method != "send":
            error = {"code": -32601, "message": f"Method not implemented: {method}"}
            self.write({"jsonrpc": "2.0", "error": error, "id": rid})
            return
        to = params.get("recipient") or [params.get("groupId")]
        stamp = self.stamp()
        address = {"number": to[0], "uuid": None}
        for name, kind in (("rate-limit-sends", "RATE_LIMIT_FAILURE"),):
            if self.take(name):
                response = {
                    "timestamp": stamp,
                    "results": [{"recipientAddress": address, "type": kind}],
                }
                error = {
                    "code": -1,
                    "message": "Failed to send message",
                    "data": {"response": response},
                }
                self.write({"jsonrpc": "2.0", "error": error, "id": rid})
                return
        if self.take("refuse-sends"):
            error = {"code": -32602, "message": "Invalid recipient"}
            self.write({"jsonrpc": "2.0", "error": error, "id": rid})
            return
        kind = "NETWORK_FAILURE" if self.take("network-failure-sends") else "SUCCESS"
        if kind == "SUCCESS":
            self.log("sent.jsonl", {"timestamp": stamp, "params": params})
        result = {"timestamp": stamp, "results": [{"recipientAddress": address, "type": kind}]}
        self.write({"jsonrpc": "2.0", "result": result, "id": rid})

    def feed(self) -> None:
        inbox = self.root / "inbox"
        while True:
            if (self.root / "exit").exists():
                (self.root / "exit").unlink()
                os._exit(0)
            for path in sorted(inbox.glob("*.json")):
                envelope = json.loads(path.read_text())
                path.unlink()
                params = {"envelope": envelope, "account": ACCOUNT}
                self.write({"jsonrpc": "2.0", "method": "receive", "params": params})
            time.sleep(0.05)


def main() -> None:
    root = Path(os.environ["FAKE_SIGNAL_DIR"])
    fake = Fake(root)
    if sys.argv[1:] != ["-a", ACCOUNT, "jsonRpc"]:
        print(f"unexpected arguments {sys.argv[1:]}", file=sys.stderr)
        sys.exit(1)
    with (root / "starts").open("a") as f:
        f.write(f"{os.getpid()}\n")
    threading.Thread(target=fake.feed, daemon=True).start()
    for line in sys.stdin:
        if line.strip():
            fake.answer(json.loads(line))
    os._exit(0)


if __name__ == "__main__":
    main()
