"""Alibaba ECS deployment sets for gangs (issue 10; :mod:`providers._placement`).

- ``CreateDeploymentSet``: ``DeploymentSetName`` (the gang attempt's token), ``Strategy``
  ``LowLatency`` (the nodes kept close on the network, the strategy the ECS reference offers
  for clusters; ``Availability`` would spread them), ``ClientToken``; a deployment set has no
  tags, so the gang's tags travel as JSON in its ``Description``.
- ``DescribeDeploymentSets`` by ``DeploymentSetName`` (or every set of the region, paged);
  ``DeleteDeploymentSet``: a set still holding instances is refused by the cloud
  (``DependencyViolation...``: raised, the sweep asks again), an unknown one is NOT_FOUND.
- A gang node's ``RunInstances`` carries ``DeploymentSetId``.
"""

from __future__ import annotations

import builtins
import json
from functools import partial

from providers._placement import RegionalPlacement
from providers.alibaba.client import AlibabaClient, nested
from providers.capabilities import PlacementGroup

STRATEGY = "LowLatency"


def _tags(description: object) -> dict[str, str]:
    try:
        doc = json.loads(str(description or ""))
    except ValueError:
        return {}
    tags = doc.get("provisioner-tags") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


class AlibabaPlacement(RegionalPlacement):
    """Deployment sets (the ``placement`` of :class:`providers.alibaba.adapter.AlibabaProvider`)."""

    client: AlibabaClient

    def __init__(self, client: AlibabaClient) -> None:
        super().__init__(client)

    def _find_groups(self, region: str, name: str | None = None) -> builtins.list[PlacementGroup]:
        models, client = self.client.models(), self.client.ecs(region)
        out: builtins.list[PlacementGroup] = []
        page = 1
        while True:
            req = models.DescribeDeploymentSetsRequest(
                region_id=region, deployment_set_name=name, page_number=page, page_size=50
            )
            body = self.client.body(
                self.client.call(
                    "DescribeDeploymentSets", partial(client.describe_deployment_sets, req)
                )
            )
            rows = nested(body, "DeploymentSets", "DeploymentSet")
            for raw in rows:
                out.append(
                    PlacementGroup(
                        id=str(raw.get("DeploymentSetId", "")),
                        name=str(raw.get("DeploymentSetName", "")),
                        region=region,
                        tags=_tags(raw.get("DeploymentSetDescription")),
                    )
                )
            if len(rows) < 50 or page * 50 >= int(body.get("TotalCount") or 0):
                return out
            page += 1

    def _create_group(self, region: str, zone: str, name: str, tags: dict[str, str]) -> str:
        models, client = self.client.models(), self.client.ecs(region)
        req = models.CreateDeploymentSetRequest(
            region_id=region,
            deployment_set_name=name,
            strategy=STRATEGY,
            client_token=name,
            description=json.dumps({"provisioner-tags": tags}, sort_keys=True),
        )
        body = self.client.body(
            self.client.call("CreateDeploymentSet", partial(client.create_deployment_set, req))
        )
        return str(body["DeploymentSetId"])

    def _delete_group(self, region: str, group_id: str) -> None:
        models, client = self.client.models(), self.client.ecs(region)
        req = models.DeleteDeploymentSetRequest(region_id=region, deployment_set_id=group_id)
        self.client.call("DeleteDeploymentSet", partial(client.delete_deployment_set, req))
