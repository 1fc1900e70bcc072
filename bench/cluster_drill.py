"""The multi-node drill by hand: N nodes on one PostgreSQL, load and faults for minutes.

    .venv/bin/python bench/cluster_drill.py --minutes 10 --nodes 3 --seed 7 --verbose

The harness is ``tests/drills/cluster_harness.py`` (the same one the test suite runs
for 45 s); see its docstring for the load, the faults and the checks. It starts its
own throwaway PostgreSQL server (``tests/support/pg.py``; as the ``postgres`` OS user
when run as root). Prints one summary line (the figures for a release note); on a
violation it prints every violation and exits 1. The work directory (node logs,
``ops.jsonl``) is kept when the drill fails or ``--keep`` is given.
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

from tests.drills.cluster_harness import DrillConfig, run_drill
from tests.e2e.taskplane_proc import Spawner
from tests.support.pg import start_cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="load time (default 5)")
    parser.add_argument("--nodes", type=int, default=3, help="nodes (default 3)")
    parser.add_argument("--clients", type=int, default=6, help="concurrent flows (default 6)")
    parser.add_argument("--seed", type=int, default=None, help="RNG seed (default: random)")
    parser.add_argument("--ttl", type=float, default=2.0, help="TASKPLANE_LEASE_TTL_S (2)")
    parser.add_argument(
        "--kill-every",
        type=float,
        nargs=2,
        default=(3.0, 6.0),
        metavar=("MIN", "MAX"),
        help="seconds between faults (default 3 6)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--verbose", action="store_true", help="one line per fault")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    load_s = 60.0 * args.minutes
    config = DrillConfig(
        nodes=args.nodes,
        load_s=load_s,
        seed=seed,
        clients=args.clients,
        lease_ttl_s=args.ttl,
        kill_every_s=(args.kill_every[0], args.kill_every[1]),
        budget_s=load_s + 600.0,
        progress=partial(print, flush=True) if args.verbose else None,
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"cluster-drill-{seed}-"))
    print(f"cluster drill: seed={seed} nodes={args.nodes} load={load_s:.0f}s in {workdir}")
    sys.stdout.flush()
    spawner = Spawner(workdir)
    try:
        with start_cluster() as database:
            store_url = database.fresh_store_url()
            report = trio.run(partial(run_drill, config, spawner, database, store_url))
    finally:
        spawner.close()
    print(report.summary())
    if not report.ok:
        print(report.failure_text())
        return 1
    if not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
