"""The drill's ledger: what it is about to create and what it created, on disk at once.

One directory per drill under ``<state dir>/drills/<drill id>/`` holds ``ledger.json`` (the
provider and its options, the job id chosen before anything is launched, the checkpoint store,
the resources the interruption made: a FIS experiment template and its role, ...). It is
written before each thing is created, so a drill killed at any point leaves a ledger that
``provisioner drill --cleanup`` reads to delete what is there (instances are found by the
job's tag). A ledger whose resources are all gone is marked ``cleaned``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/provisioner`` (``~/.local/state/provisioner``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "provisioner"


@dataclass
class Resource:
    """Something the drill made outside its job's instances: ``kind`` (fis-template,
    iam-role, placement-group, sim-server, ...), its id, and where."""

    kind: str
    id: str
    region: str = ""
    deleted: bool = False


@dataclass
class Ledger:
    drill_id: str
    provider: str
    region: str
    job_id: str
    checkpoint_uri: str
    store_url: str
    provider_options: dict[str, Any] = field(default_factory=dict)
    resources: list[Resource] = field(default_factory=list)
    cleaned: bool = False
    path: Path | None = None

    @property
    def directory(self) -> Path:
        assert self.path is not None
        return self.path.parent

    def add(self, kind: str, rid: str, region: str = "") -> Resource:
        """Note a resource (before it is created: a kill in between leaves a name to look for)."""
        for r in self.resources:
            if r.kind == kind and r.id == rid:
                return r
        r = Resource(kind, rid, region)
        self.resources.append(r)
        self.save()
        return r

    def deleted(self, kind: str, rid: str) -> None:
        for r in self.resources:
            if r.kind == kind and r.id == rid:
                r.deleted = True
        self.save()

    def live(self, kind: str) -> list[Resource]:
        return [r for r in self.resources if r.kind == kind and not r.deleted]

    def save(self) -> None:
        if self.path is None:
            return
        doc = asdict(self)
        doc.pop("path")
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)

    @classmethod
    def create(cls, state_dir: Path, **fields: Any) -> Ledger:
        directory = state_dir / "drills" / str(fields["drill_id"])
        directory.mkdir(parents=True, exist_ok=True)
        ledger = cls(**fields, path=directory / "ledger.json")
        ledger.save()
        return ledger

    @classmethod
    def load(cls, path: Path) -> Ledger:
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["resources"] = [Resource(**r) for r in doc.get("resources", [])]
        return cls(**doc, path=path)


def open_ledgers(state_dir: Path) -> list[Ledger]:
    """Every drill under ``state_dir`` not yet cleaned up, oldest first."""
    root = state_dir / "drills"
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.glob("*/ledger.json")):
        try:
            ledger = Ledger.load(path)
        except (OSError, ValueError, TypeError):
            continue
        if not ledger.cleaned:
            out.append(ledger)
    return out
