"""How GPU instances are joined: per instance type, its network and its GPU-to-GPU path.

A multi-node job (a gang, issue 10) asks for an interconnect (``resources.interconnect``):
NVLink or NVSwitch inside a node, a least network bandwidth between nodes, an RDMA fabric
(EFA on AWS, InfiniBand elsewhere). The facts come from ``provisioner/data/network.csv``
(one row per provider and instance type, each with its source; see SOURCES.md), parsed here
from lines of text (:func:`provisioner.catalog_files.read_network` opens the file): pure.

``fabric``: ``efa``, ``infiniband``, ``roce`` (RDMA over Ethernet, e.g. Alibaba eRDMA) or ``""``
(none). ``intra_node``: ``nvswitch`` (all-to-all NVLink through switches), ``nvlink`` (NVLink
bridges or a mesh), ``pcie``, or ``""`` when unknown.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from policies.model import Interconnect
from provisioner.errors import InputError

COLUMNS = (
    "provider",
    "instance_type",
    "network_gbps",
    "fabric",
    "intra_node",
    "efa_interfaces",
    "source",
)
FABRICS = ("efa", "infiniband", "roce", "")

#: clouds whose placement groups only spread instances apart (no proximity): Tencent's
#: ``DisasterRecoverGroup`` (``HOST``, ``SW``, ``RACK``: each keeps its instances on different
#: hosts, switches or racks; CVM API ``CreateDisasterRecoverGroup``; providers/tencent/
#: placement.py). A gang asking for ``inter_node: placement-group`` is not placed there;
#: ``same-zone`` accepts it.
SPREAD_ONLY_GROUPS = frozenset({"tencent"})


def spread_only_why(provider: str) -> str:
    return (
        f"{provider}'s placement groups only spread instances apart (no proximity); "
        "resources.interconnect.inter_node: same-zone accepts a gang there"
    )


INTRA = ("nvswitch", "nvlink", "pcie", "")


class NetworkFileError(InputError, ValueError):
    """A network facts file that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class NetworkFacts:
    """What one instance type's network and GPU links are."""

    provider: str
    instance_type: str
    network_gbps: float | None  # per instance, Gbit/s, as the cloud states it
    fabric: str  # efa, infiniband, roce or ""
    intra_node: str  # nvswitch, nvlink, pcie or "" (unknown)
    source: str = ""
    efa_interfaces: int = 0  # AWS: EFA interfaces the type takes (one per network card)


NetworkTable = Mapping[tuple[str, str], NetworkFacts]


def parse_network(lines: Iterable[str], source: str) -> dict[tuple[str, str], NetworkFacts]:
    """The facts in a network CSV (``source`` names it in errors), keyed by (provider, type)."""
    reader = csv.DictReader(lines)
    optional = ("efa_interfaces",)  # files written before it keep reading
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ()) and c not in optional]
    if missing:
        raise NetworkFileError(f"{source}: missing column(s) {', '.join(missing)}")
    out: dict[tuple[str, str], NetworkFacts] = {}
    for row in reader:
        where = f"{source}:{reader.line_num}"
        fabric = (row["fabric"] or "").strip().lower()
        intra = (row["intra_node"] or "").strip().lower()
        if fabric not in FABRICS:
            raise NetworkFileError(
                f"{where}: fabric {fabric!r} is not one of efa, infiniband, roce"
            )
        if intra not in INTRA:
            raise NetworkFileError(
                f"{where}: intra_node {intra!r} is not one of nvswitch, nvlink, pcie"
            )
        text = (row["network_gbps"] or "").strip()
        try:
            gbps = float(text) if text else None
        except ValueError:
            raise NetworkFileError(f"{where}: network_gbps {text!r} is not a number") from None
        if gbps is not None and not gbps > 0:
            raise NetworkFileError(f"{where}: network_gbps must be above 0")
        key = (row["provider"].strip(), row["instance_type"].strip())
        if key in out:
            raise NetworkFileError(f"{where}: {key[0]} {key[1]} is listed twice")
        efa = (row.get("efa_interfaces") or "").strip()
        if efa and not (efa.isdigit() and int(efa) > 0):
            raise NetworkFileError(f"{where}: efa_interfaces {efa!r} is not a count above 0")
        out[key] = NetworkFacts(
            key[0],
            key[1],
            gbps,
            fabric,
            intra,
            (row["source"] or "").strip(),
            int(efa) if efa else 0,
        )
    return out


def interconnect_violation(
    need: Interconnect, facts: NetworkFacts | None, *, gang: bool
) -> str | None:
    """Why an instance type does not meet ``need`` (None: it does). Unknown facts meet only
    what asks for nothing. ``gang``: the job has more than one node (the inter-node needs
    apply only then)."""
    if need.intra_node in ("nvlink", "nvswitch"):
        have = facts.intra_node if facts else ""
        if not have:
            return "GPU links unknown"
        if need.intra_node == "nvswitch" and have != "nvswitch":
            return f"{have} inside the node, not NVSwitch"
        if need.intra_node == "nvlink" and have not in ("nvlink", "nvswitch"):
            return f"{have} inside the node, not NVLink"
    if not gang:
        return None
    if need.fabric != "any":
        have = facts.fabric if facts else ""
        ok = have in ("efa", "infiniband", "roce") if need.fabric == "rdma" else have == need.fabric
        if not ok:
            return f"no {need.fabric.upper() if need.fabric == 'efa' else need.fabric}"
    if need.min_network_gbps is not None:
        gbps = facts.network_gbps if facts else None
        if gbps is None:
            return "network bandwidth unknown"
        if gbps + 1e-9 < need.min_network_gbps:
            return f"{gbps:g} Gbps < {need.min_network_gbps:g} Gbps"
    return None


def wants_interconnect(need: Interconnect, nodes: int) -> bool:
    """Whether the policy asks anything of the network facts (else they are not read)."""
    if need.intra_node in ("nvlink", "nvswitch"):
        return True
    return nodes > 1 and (need.fabric != "any" or need.min_network_gbps is not None)
