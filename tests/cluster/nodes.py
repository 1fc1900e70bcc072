"""Two task planes on one PostgreSQL database in one process: two nodes of a cluster.

Each node has its own store root, id, agent and store actor; they share the database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

from taskplane.actors.plane import TaskPlane
from taskplane.app import PlaneOptions, open_plane
from taskplane.bridge.manifest import parse_manifest
from taskplane.cluster.identity import NodeIdentity
from tests.support.agent import Agent
from tests.support.plane import MANIFEST, PUBLIC_URL


@attrs.frozen
class Node:
    plane: TaskPlane
    agent: Agent


@asynccontextmanager
async def open_node(url: str, root: Path, name: str, agent: Agent) -> AsyncIterator[Node]:
    outputs = parse_manifest(MANIFEST, None, where="tests")
    async with open_plane(
        root / name,
        public_url=PUBLIC_URL,
        outputs=outputs,
        options=PlaneOptions(runtime=agent),
        store_url=url,
        node=NodeIdentity(name),
    ) as plane:
        agent.plane = plane
        yield Node(plane, agent)
