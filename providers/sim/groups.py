"""The sim's placement groups: a record per group, kept in ``<state>/groups.json``.

A gang's nodes on the sim all run on this machine, so a group places nothing; what it keeps
is what a cloud's construct keeps and what the controller must get right: one group per
name (a second create returns the first), the tags it was made with, a refusal to delete a
group while a live instance is in it (as EC2's ``InvalidPlacementGroup.InUse``), and which
group each instance was launched into (``placement_group`` on the instance).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from providers.sim.records import atomic_json
from provisioner.core.models import TAG_JOB, TAG_NODE, TAG_NODES
from provisioner.errors import CloudError


class GroupError(CloudError):
    def __init__(self, status: int, kind: str, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code


class PlacementGroupBook:
    """Placement groups by id; the caller holds the cloud's lock."""

    def __init__(self, state_dir: Path, instances: Mapping[str, dict[str, Any]]) -> None:
        self.path = state_dir / "groups.json"
        self.instances = instances  # the cloud's, by id (read under its lock)
        self.groups: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            try:
                self.groups = dict(json.loads(self.path.read_text()))
            except (OSError, ValueError):
                self.groups = {}

    def ensure(self, doc: dict[str, Any]) -> dict[str, Any]:
        name = str(doc.get("name") or "")
        if not name:
            raise GroupError(400, "invalid", "InvalidParameterValue", "a group needs a name")
        for g in self.groups.values():
            if g["name"] == name:
                return g
        gid = f"pg-{secrets.token_hex(6)}"
        group = {
            "id": gid,
            "name": name,
            "region": str(doc.get("region") or ""),
            "zone": str(doc.get("zone") or ""),
            "strategy": "cluster",
            "tags": {str(k): str(v) for k, v in (doc.get("tags") or {}).items()},
        }
        self.groups[gid] = group
        atomic_json(self.path, self.groups)
        return group

    def in_use(self, gid: str) -> list[str]:
        """The live instances in group ``gid``."""
        return [
            i["id"]
            for i in self.instances.values()
            if i.get("placement_group") == gid and i["state"] in ("pending", "running")
        ]

    def delete(self, gid: str) -> bool:
        if gid not in self.groups:
            return False
        users = self.in_use(gid)
        if users:
            raise GroupError(
                409,
                "invalid",
                "InvalidPlacementGroup.InUse",
                f"placement group {gid} is in use by {', '.join(users)}",
            )
        del self.groups[gid]
        atomic_json(self.path, self.groups)
        return True

    def find(self, tags: dict[str, str]) -> list[dict[str, Any]]:
        return [
            g for g in self.groups.values() if all(g["tags"].get(k) == v for k, v in tags.items())
        ]


def groups_api(cloud: Any, op: str, doc: dict[str, Any]) -> Any:
    """The server's routes: ``ensure`` (by name), ``delete`` (by id; in use: refused) or
    ``list`` (by tags), under the cloud's lock; errors as the sim's API errors."""
    from providers.sim.config import SimError

    with cloud.lock:
        cloud.touch()
        book: PlacementGroupBook = cloud.groups
        try:
            if op == "ensure":
                return book.ensure(doc)
            if op == "delete":
                return {"deleted": book.delete(str(doc.get("id") or ""))}
            return {"groups": book.find(dict(doc.get("tags") or {}))}
        except GroupError as exc:
            raise SimError(exc.status, exc.kind, exc.code, str(exc)) from None


def demo_first(inst: dict[str, Any], others: Iterable[dict[str, Any]], at: float) -> None:
    """The demo's preemption (``preempt_first_after_s``): the first spot instance of a job is
    taken at ``at``; of a gang, its last node (the one that is not rank 0), once per job."""
    tags = inst["tags"]
    if TAG_NODES in tags and tags.get(TAG_NODE) != str(int(tags[TAG_NODES]) - 1):
        return
    job = tags.get(TAG_JOB) or inst["token"]
    if not any(i["tags"].get(TAG_JOB, i["token"]) == job and i["demo_at_real"] for i in others):
        inst["demo_at_real"] = at
