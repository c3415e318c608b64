"""GCP quotas: the regional GPU quotas from ``regions.get``.

A region's ``quotas`` (https://cloud.google.com/compute/docs/reference/rest/v1/regions/get)
carry one ``metric`` per GPU model, with its ``limit`` and ``usage``: ``NVIDIA_A100_GPUS``
for standard VMs and ``PREEMPTIBLE_NVIDIA_A100_GPUS`` for Spot and preemptible ones
(https://cloud.google.com/compute/resource-usage#gpu_quota). Where a region grants no
preemptible quota for a model (absent or 0), Spot VMs draw on the standard one, so that one
then covers both markets. Only the GPU metrics are kept (``..._GPUS``).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from providers.gcp.client import GCPClient
from provisioner.core.quotas import ANY, GPU, Quota

PREEMPTIBLE = "PREEMPTIBLE_"


class GCPQuotas:
    """The project's regional GPU quotas (its Regions client made on first use)."""

    def __init__(self, client: GCPClient) -> None:
        self.client = client
        self._regions_client: Any = None
        self._lock = threading.Lock()

    def regions_client(self) -> Any:
        with self._lock:
            if self._regions_client is None:
                from google.api_core.client_options import ClientOptions
                from google.cloud import compute_v1

                opts = (
                    ClientOptions(api_endpoint=self.client.endpoint)
                    if self.client.endpoint
                    else None
                )
                self._regions_client = compute_v1.RegionsClient(
                    credentials=self.client.credentials, client_options=opts, transport="rest"
                )
            return self._regions_client

    def quotas(self, regions: Iterable[str] | None = None) -> builtins.list[Quota]:
        client = self.regions_client()
        out: builtins.list[Quota] = []
        for region in list(regions or self.client.regions):
            answer: Any = self.client.call(
                f"regions.get {region}",
                partial(client.get, project=self.client.project, region=region),
            )
            now = datetime.now(UTC)
            rows = {
                str(q.metric): (float(q.limit), float(q.usage))
                for q in answer.quotas
                if str(q.metric).endswith("_GPUS")
            }
            for metric, (limit, usage) in sorted(rows.items()):
                spot = metric.startswith(PREEMPTIBLE)
                if spot and limit <= 0:
                    continue  # none granted: Spot VMs use the standard quota
                if spot:
                    market = "spot"
                else:
                    granted = rows.get(PREEMPTIBLE + metric, (0.0, 0.0))[0]
                    market = "on-demand" if granted > 0 else ANY
                out.append(
                    Quota(
                        provider="gcp",
                        region=region,
                        name=metric,
                        note="Spot/preemptible GPUs" if spot else "GPUs",
                        unit=GPU,
                        limit=limit,
                        used=usage,
                        market=market,
                        families=(metric,),
                        at=now,
                    )
                )
        return out
