"""What the plane adds per LLM call: the ``openai`` runtime against a zero-latency model.

A scripted OpenAI-compatible chat-completions server (the test suite's fake, served
by this script on 127.0.0.1) answers every request at once. A ``taskplane serve``
with ``A2A_AGENT_RUNTIME=openai`` pointed at it then gets ``--requests`` blocking
sends, one at a time (``hello``: each Task takes 3 model calls: read, complete, final
answer). A second server, with the scripted agent, gets the same sends. The difference
of the two medians divided by 3 is the overhead per LLM call the plane and the openai
client add (tool dispatch through the Task's owner, the store commits of the tools,
the transcript saved with fsync after every step, the HTTP round trip to the model),
with no model time at all.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._common import (  # noqa: E402
    TOKEN,
    Server,
    Workdir,
    fmt_ms,
    fsync_probe,
    machine_info,
    percentile,
    send_body,
    stop_and_report,
)
from tests.bridge.fake_openai import FakeOpenAI, serve_fake  # noqa: E402

MODEL_CALLS_PER_TASK = 3


async def measure(server: Server, requests: int, warmup: int) -> list[float]:
    headers = {"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0"}
    latencies = []
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as c:
        for i in range(warmup + requests):
            started = time.monotonic()
            response = await c.post("/message:send", json=send_body("hello", immediate=False))
            elapsed = time.monotonic() - started
            task = response.json()["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
            if i >= warmup:
                latencies.append(elapsed)
    return sorted(latencies)


def line(label: str, values: list[float]) -> str:
    return (
        f"{label:>9}: n={len(values)} p50={fmt_ms(percentile(values, 50))} ms "
        f"p99={fmt_ms(percentile(values, 99))} ms"
    )


async def main(args: argparse.Namespace) -> None:
    print(machine_info())
    with Workdir(args.tmp, keep=args.keep) as work:
        print(fsync_probe(work))
        fake = FakeOpenAI()
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake, stop)
            results = {}
            for label, env in (
                ("scripted", {}),
                (
                    "openai",
                    {
                        "A2A_AGENT_RUNTIME": "openai",
                        "A2A_AGENT_MODEL": "zero-latency",
                        "OPENAI_BASE_URL": url,
                        "OPENAI_API_KEY": "sk-bench",
                    },
                ),
            ):
                server = Server(work / label, work / label / "store", extra_env=env, label=label)
                (work / label).mkdir()
                await trio.to_thread.run_sync(server.start)
                try:
                    results[label] = await measure(server, args.requests, args.warmup)
                finally:
                    await trio.to_thread.run_sync(partial(stop_and_report, server))
                print(line(label, results[label]))
            stop.set()
        extra = percentile(results["openai"], 50) - percentile(results["scripted"], 50)
        print(
            f"overhead per LLM call (median, {MODEL_CALLS_PER_TASK} calls per Task): "
            f"{fmt_ms(extra / MODEL_CALLS_PER_TASK)} ms; model requests seen: {len(fake.requests)}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--tmp", default=None, help="parent directory of the work dir")
    parser.add_argument("--keep", action="store_true", help="keep the work dir and logs")
    trio.run(main, parser.parse_args())
