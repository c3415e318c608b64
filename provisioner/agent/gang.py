"""The agents of a gang (issue 10) meet through the checkpoint store they already share.

Every node of a multi-node attempt runs its own agent with its rank (``spec.node``) and the
gang's size (``spec.nodes``). Under ``<root>/gang/a<attempt>/`` in the checkpoint store:

- ``master.json``: node 0 announces where its job listens (``{"addr", "port"}``); the other
  agents wait for it before they start their job, and give every job the environment torchrun
  gives its workers (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``NODE_RANK``,
  ``NNODES``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``: one process per node);
- ``notice.json``: the first agent whose VM gets an interruption notice (or is told to stop)
  says so here; every agent polls it with its metadata, and treats it as its own notice:
  the whole gang is asked to checkpoint at once; rank 0's job writes the checkpoint, and the
  gang goes and comes back together from it.

Only node 0 reports progress to ``progress.json`` and uploads output; the others write
``gang/a<attempt>/node-<k>.json``. A job that loses a peer exits
:data:`EXIT_PEER_LOST` (75, EX_TEMPFAIL): the agent reads that as interrupted, not failed.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from provisioner.agent.notices import Notice
from provisioner.agent.store import CheckpointStore
from provisioner.core.timefmt import parse_time
from provisioner.errors import AgentError

log = logging.getLogger("provisioner.agent")

#: The exit code a gang's job uses when a peer went (the agent: interrupted, not failed).
EXIT_PEER_LOST = 75
#: How long a node waits for node 0's announcement before it gives up.
RENDEZVOUS_TIMEOUT_S = 900.0


class RendezvousError(AgentError, RuntimeError):
    """Node 0 never announced itself (or the agent was told to stop while waiting)."""


def default_address() -> str:
    """The address of this host's default route (no packet is sent), else loopback."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        return str(s.getsockname()[0])
    return "127.0.0.1"


def free_port(addr: str) -> int:
    """A TCP port free on ``addr`` now (the job binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr if addr != "0.0.0.0" else "", 0))
        return int(s.getsockname()[1])


class Gang:
    """One node's view of its gang in the checkpoint store."""

    def __init__(self, store: CheckpointStore, attempt: int, node: int, nodes: int) -> None:
        self.store = store
        self.node = node
        self.nodes = nodes
        self.prefix = f"gang/a{attempt}"
        self.master: dict[str, Any] | None = None

    # -- rendezvous --------------------------------------------------------------------------

    def announce(self, addr: str) -> dict[str, Any]:
        """Node 0: where its job will listen (a free port on ``addr``)."""
        self.master = {"addr": addr, "port": free_port(addr), "nodes": self.nodes}
        self.store.write_progress(self.master, f"{self.prefix}/master.json")
        return self.master

    def await_master(
        self, stop: Callable[[], bool], timeout_s: float = RENDEZVOUS_TIMEOUT_S
    ) -> dict[str, Any]:
        """The other nodes: node 0's announcement, polled until it is there."""
        until = time.monotonic() + timeout_s
        while True:
            doc = self.store.read_json(f"{self.prefix}/master.json")
            if doc and doc.get("addr") and doc.get("port"):
                self.master = doc
                return doc
            if stop():
                raise RendezvousError("told to stop while waiting for node 0")
            if time.monotonic() >= until:
                raise RendezvousError(f"node 0 did not announce itself within {timeout_s:.0f} s")
            time.sleep(0.2)

    def meet(self, advertise: str, stop: Callable[[], bool]) -> dict[str, str]:
        """Announce (node 0) or wait for node 0 (the others); torchrun's environment."""
        if self.node == 0:
            self.announce(advertise or default_address())
        else:
            self.await_master(stop)
        return self.env()

    def env(self) -> dict[str, str]:
        """torchrun's environment for this node's one process."""
        assert self.master is not None
        return {
            "MASTER_ADDR": str(self.master["addr"]),
            "MASTER_PORT": str(self.master["port"]),
            "RANK": str(self.node),
            "WORLD_SIZE": str(self.nodes),
            "NODE_RANK": str(self.node),
            "GROUP_RANK": str(self.node),
            "NNODES": str(self.nodes),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
        }

    # -- notices -----------------------------------------------------------------------------

    def raise_notice(self, notice: Notice) -> None:
        """Tell the gang this node is going (the first notice stands)."""
        if self.store.read_json(f"{self.prefix}/notice.json"):
            return
        doc = {
            "node": self.node,
            "seen_at": notice.seen_at.isoformat(),
            "deadline": notice.deadline.isoformat() if notice.deadline else None,
            "raw": notice.raw[:200],
        }
        self.store.write_progress(doc, f"{self.prefix}/notice.json")

    def notice(self, cloud: str) -> Notice | None:
        """Another node's notice, as this node's own (None: none)."""
        doc = self.store.read_json(f"{self.prefix}/notice.json")
        if not doc or doc.get("node") == self.node:
            return None
        seen = parse_time(doc.get("seen_at")) or datetime.now(UTC)
        deadline = parse_time(doc.get("deadline")) or seen + timedelta(seconds=30)
        raw = f"gang: node {doc.get('node')}: {doc.get('raw', '')}"
        return Notice(cloud, seen, deadline, raw)

    def notice_at_exit(self, cloud: str) -> Notice | None:
        """Another node's notice, read once more as this node's job ends: a job's collective
        may stop it on a peer's notice before this agent's next look, and node 0's record must
        still say the gang had a notice (the controller learns of it there)."""
        try:
            return self.notice(cloud)
        except Exception as exc:  # an unreachable checkpoint store: the record says less
            log.warning("cannot read the gang's notice: %s", exc)
            return None

    def write_node_progress(self, doc: dict[str, Any]) -> None:
        self.store.write_progress(doc, f"{self.prefix}/node-{self.node}.json")
