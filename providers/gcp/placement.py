"""GCP placement (issue 10): a gang's nodes under one *compact placement policy*.

A compact placement policy is a regional resource policy (``resourcePolicies.insert``) with
``groupPlacementPolicy.collocation = COLLOCATED``; an instance joins it through its own
``resourcePolicies`` field at insert (the policy and the instance in one region). No ``vmCount``:
the interface does not carry the gang's size, and a policy with one only works with exactly that
many instances.

- Resource policies have no labels, so the tags are kept as a JSON object in the policy's
  ``description``; ``list_placement_groups`` narrows the project's policies on the server (an
  aggregated list whose ``filter`` asks for a description naming ``provisioner-managed``) and
  compares the decoded tags exactly.
- ``ensure_placement_group`` gets the policy by name first; it inserts it only when it is not
  there, with a ``requestId`` of its own (the call's retries are one insert; not derived from
  the name, since a policy made again under a name after a delete is a new insert), and waits
  on the regional operation. ``409 alreadyExists`` means it is
  there (a crash, or a lost answer, between the insert and its record).
- The id is the policy's path, ``projects/<p>/regions/<r>/resourcePolicies/<name>``: what an
  instance's ``resourcePolicies`` carries, and where delete finds it.
- ``delete_placement_group``: ``404`` (gone, or never made) is not an error; a policy still
  used by an instance (``400 resourceInUseByAnotherResource``) raises, classified by the error
  table, and the caller tries again at a later pass.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import logging
import re
import uuid
from collections.abc import Mapping
from typing import Any

from providers._common import has_tags, unless_gone
from providers.base import ErrorKind, ProviderError
from providers.capabilities import PlacementGroup
from providers.gcp.client import GCPClient
from providers.gcp.instances import GCPInstances
from provisioner.core.models import TAG_MANAGED

log = logging.getLogger("provisioner.providers.gcp")

COLLOCATION = "COLLOCATED"
_PATH = re.compile(
    r"(?:.*/)?(?:projects/(?P<project>[^/]+)/)?regions/(?P<region>[^/]+)"
    r"/resourcePolicies/(?P<name>[^/]+)"
)


def policy_path(project: str, region: str, name: str) -> str:
    """The id of a placement policy: its path, as an instance's ``resourcePolicies`` names it."""
    return f"projects/{project}/regions/{region}/resourcePolicies/{name}"


def parse_policy(text: str) -> tuple[str, str] | None:
    """``(region, name)`` of a policy path or URL (``.../regions/R/resourcePolicies/N``), or
    of ``R/N``; None for anything else."""
    m = _PATH.fullmatch(text)
    if m:
        return m.group("region"), m.group("name")
    region, _, name = text.partition("/")
    if region and name and "/" not in name:
        return region, name
    return None


def tags_of(description: str) -> dict[str, str] | None:
    """The tags a policy's description carries (a JSON object), or None where it carries none."""
    with contextlib.suppress(ValueError, TypeError):
        found = json.loads(description)
        if isinstance(found, dict):
            return {str(k): str(v) for k, v in found.items()}
    return None


class GCPPlacement:
    """The placement-policy operations (:class:`providers.capabilities.PlacementGroups`)."""

    def __init__(self, client: GCPClient, instances: GCPInstances) -> None:
        self.client = client
        self.instances = instances

    def ensure_placement_group(
        self, name: str, region: str, zone: str, tags: Mapping[str, str]
    ) -> str:
        region = region or zone.rsplit("-", 1)[0]
        path = policy_path(self.client.project, region, name)
        if self._get_policy(region, name) is not None:
            return path
        from google.cloud import compute_v1

        policy = compute_v1.ResourcePolicy(
            name=name,
            region=region,
            description=json.dumps(dict(tags), sort_keys=True, separators=(",", ":")),
            group_placement_policy=compute_v1.ResourcePolicyGroupPlacementPolicy(
                collocation=COLLOCATION
            ),
        )
        # one requestId for this call's retries (not derived from the name: a policy made
        # again under its name after a delete is a new insert)
        insert = compute_v1.InsertResourcePolicyRequest(
            project=self.client.project,
            region=region,
            resource_policy_resource=policy,
            request_id=str(uuid.uuid4()),
        )
        c = self.client.clients()
        try:
            op = self.client.call(
                "resourcePolicies.insert",
                lambda: c.resource_policies.insert(
                    request=insert, retry=None, timeout=self.client.request_timeout
                ),
            )
        except ProviderError as err:
            if err.code != "alreadyExists":
                raise
            log.info("gcp: placement policy %s in %s was there already", name, region)
            return path
        self._wait_region(region, op.name)
        log.info("gcp: created compact placement policy %s in %s", name, region)
        return path

    def delete_placement_group(self, group_id: str) -> None:
        where = parse_policy(group_id)
        if where is None:
            return  # not an id this adapter made: nothing of ours to delete
        region, name = where
        c = self.client.clients()
        delete = functools.partial(
            c.resource_policies.delete,
            project=self.client.project,
            region=region,
            resource_policy=name,
            retry=None,
            timeout=self.client.request_timeout,
        )
        op = unless_gone(functools.partial(self.client.call, "resourcePolicies.delete", delete))
        if op is None:
            return
        unless_gone(functools.partial(self._wait_region, region, op.name))
        log.info("gcp: deleted placement policy %s in %s", name, region)

    def list_placement_groups(
        self, tags: Mapping[str, str] | None = None
    ) -> builtins.list[PlacementGroup]:
        from google.cloud import compute_v1

        wanted = {TAG_MANAGED: "true", **(tags or {})}
        request = compute_v1.AggregatedListResourcePoliciesRequest(
            project=self.client.project, filter=f'description eq ".*{TAG_MANAGED}.*"'
        )
        out: builtins.list[PlacementGroup] = []
        for scope, scoped in self.client.aggregated(
            self.client.clients().resource_policies, request
        ):
            for policy in scoped.resource_policies:
                found = tags_of(policy.description)
                if found is None or not has_tags(found, wanted):
                    continue
                region = (policy.region or scope).rsplit("/", 1)[-1]
                if _status(policy) == "DELETING":
                    continue
                path = policy_path(self.client.project, region, policy.name)
                out.append(PlacementGroup(path, policy.name, region, found))
        return out

    def _get_policy(self, region: str, name: str) -> Any | None:
        """The ResourcePolicy ``name`` in ``region``, or None where there is none."""
        c = self.client.clients()
        return unless_gone(
            lambda: self.client.call(
                "resourcePolicies.get",
                lambda: c.resource_policies.get(
                    project=self.client.project,
                    region=region,
                    resource_policy=name,
                    retry=None,
                    timeout=self.client.request_timeout,
                ),
            )
        )

    def _wait_region(self, region: str, operation: str) -> None:
        c = self.client.clients()
        self.instances.wait_on(
            operation,
            lambda: c.region_operations.wait(
                project=self.client.project,
                region=region,
                operation=operation,
                retry=None,
                timeout=self.client.request_timeout,
            ),
        )

    def policy_for(self, group: str, zone: str) -> str:
        """The ``resourcePolicies`` entry of a node launched into ``group`` in ``zone``: the
        policy's path, refused before sending where its region is not the zone's."""
        where = parse_policy(group)
        region = zone.rsplit("-", 1)[0]
        if where is None or where[0] != region:
            raise ProviderError(
                ErrorKind.INVALID,
                "PlacementPolicyRegion",
                f"placement policy {group} cannot hold an instance in {zone} (a policy and its "
                "instances are in one region)",
                provider="gcp",
            )
        return policy_path(self.client.project, *where)


def _status(policy: Any) -> str:
    return str(getattr(policy.status, "name", policy.status) or "")
