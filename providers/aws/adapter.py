"""The AWS adapter: :class:`AWSProvider` composes the offers and the instance operations."""

from __future__ import annotations

from providers.aws.commitments import AWSCommitments
from providers.aws.instances import AWSInstances
from providers.aws.placement import AWSPlacement
from providers.aws.priors import AWSPriors
from providers.aws.quotas import AWSQuotas
from providers.aws.reservations import AWSReservations
from providers.base import Provider


class AWSProvider(
    AWSReservations, AWSCommitments, AWSQuotas, AWSPriors, AWSPlacement, AWSInstances, Provider
):
    """EC2 in one or more regions.

    ``credentials``: a dict with ``aws_access_key_id``/``aws_secret_access_key``
    (/``aws_session_token``) or ``profile``; None uses boto3's default chain (environment,
    shared files, instance role). ``endpoint``: an EC2 endpoint URL (moto's server in tests).
    ``subnets`` maps a zone to the subnet to launch into there; ``subnet`` is used otherwise.
    ``instance_profile`` (name or ARN) gives the VM its identity for the checkpoint store.
    ``package_spec``/``pip_args``: how the bootstrap script installs provisioner on the VM
    when a request carries a ``job_spec`` and no ``user_data``; ``agent_preinstalled``: the
    image has it in ``/opt/provisioner/venv`` and nothing is installed.
    ``pricing_endpoint``: the Price List Query API's URL (a local server in tests); with a
    custom EC2 ``endpoint`` and none given, on-demand prices come from the catalog.
    ``on_demand_ttl_s``: how long fetched on-demand prices are kept.
    ``page_size``: ``MaxResults`` of the list calls (5 or more; None: the service's default).

    A gang's nodes go into one cluster placement group (:mod:`providers.aws.placement`); a
    launch with ``fabric="efa"`` asks for one EFA per network card, as many as the type takes. ``quotas()`` reads the GPU
    families' vCPU quotas from Service Quotas (:mod:`providers.aws.quotas`); ``priors()`` the
    Spot placement scores and price volatility per zone (:mod:`providers.aws.priors`).
    ``reservations()`` lists the capacity reservations and capacity blocks the account holds,
    ``capacity_offerings()``/``book()`` list and buy Capacity Blocks
    (:mod:`providers.aws.reservations`); a reserved launch targets its reservation.
    """

    name = "aws"
