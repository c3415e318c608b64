"""The GCP adapter: :class:`GCPProvider` composes the offers, prices and instance operations."""

from __future__ import annotations

from providers.base import Provider
from providers.gcp.launch import GCPLaunch
from providers.gcp.offers import GCPOffers
from providers.gcp.quotas import GCPQuotas


class GCPProvider(GCPOffers, GCPQuotas, GCPLaunch, Provider):
    """Compute Engine in one project.

    ``project``: the project id (default: the one ``google.auth.default()`` finds).
    ``zones``/``regions``: where offers are listed (instances are found in every zone).
    ``credentials``: google-auth credentials, a service-account JSON path, or None for
    application-default credentials. ``endpoint``: a Compute API root (``http://127.0.0.1:P``
    in tests); ``billing_endpoint``: the Cloud Billing API root; ``billing_api_key``: an API key
    for it (else the credentials are used). ``termination_action``: what GCP does to a Spot VM
    it preempts, ``DELETE`` (default) or ``STOP``. ``service_account``: the email the VM runs
    as (with the ``cloud-platform`` scope), its identity for the bucket and Secret Manager.
    ``package_spec``/``pip_args``: how the startup script installs provisioner on the VM;
    ``agent_preinstalled``: the image has it in ``/opt/provisioner/venv``, nothing is installed.

    A gang's nodes go under one compact placement policy (:mod:`providers.gcp.placement`,
    through :class:`~providers.gcp.launch.GCPLaunch`).
    """

    name = "gcp"

    def account_id(self) -> str | None:
        """The project launches are billed to."""
        return str(self.project) if self.project else None
