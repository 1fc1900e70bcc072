"""Crash drill as a script: SIGKILL the real server under concurrent sends, N times.

    .venv/bin/python bench/crash_drill.py --kills 200 --seed 7 --clients 8

The harness is ``tests/drills/crash_harness.py`` (the same one the test suite runs);
see its docstring for what is checked. Prints one summary line; on a violation it
prints the failure report (seed, messageIds, server stderr) and exits 1. The work
directory (store, server logs) is kept when the drill fails or ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from functools import partial
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.drills.crash_harness import DrillConfig, run_drill


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="RNG seed (default: random)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument(
        "--max-kill-delay", type=float, default=0.6, help="longest traffic before a kill, s"
    )
    parser.add_argument(
        "--startup-kill-every",
        type=int,
        default=8,
        help="every n-th kill lands while the server starts (0: never; default 8)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--verbose", action="store_true", help="one line per kill")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    config = DrillConfig(
        kills=args.kills,
        seed=seed,
        clients=args.clients,
        max_kill_delay_s=args.max_kill_delay,
        startup_kill_every=args.startup_kill_every,
        budget_s=max(600.0, 15.0 * args.kills),
        progress=partial(print, flush=True) if args.verbose else None,
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"crash-drill-{seed}-"))
    print(f"crash drill: seed={seed} kills={args.kills} clients={args.clients} in {workdir}")
    sys.stdout.flush()
    report = trio.run(partial(run_drill, config, workdir))
    print(report.summary())
    if not report.ok:
        print(report.failure_text())
        return 1
    if not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
