"""The Azure adapter: :class:`AzureProvider` composes the offers, prices and VM operations."""

from __future__ import annotations

from providers.azure.commitments import AzureCommitments
from providers.azure.launch import AzureLaunch
from providers.azure.placement import AzurePlacement
from providers.azure.priors import AzurePriors
from providers.azure.quotas import AzureQuotas
from providers.base import Provider


class AzureProvider(
    AzureCommitments, AzureQuotas, AzurePriors, AzurePlacement, AzureLaunch, Provider
):
    """Azure VMs in one subscription and resource group.

    ``subscription_id`` (default ``$AZURE_SUBSCRIPTION_ID``), ``resource_group``,
    ``location``/``locations`` (regions offers and prices cover), ``subnet_id`` (the subnet the
    NICs join; needed to launch). ``credentials``: an azure-identity credential, a dict with
    ``tenant_id``/``client_id``/``client_secret``, a bearer token string, or None for
    ``DefaultAzureCredential``. ``endpoint``: the ARM root (``http://127.0.0.1:P`` in tests);
    ``prices_endpoint``: the Retail Prices API root. ``image``: ``publisher:offer:sku:version``
    or an image resource id. ``eviction_policy``: ``Delete`` (default) or ``Deallocate``.
    ``identity``: the VM's managed identity, ``system`` (system-assigned) or a user-assigned
    identity's resource id; the agent reads the bucket and Key Vault with it.
    ``package_spec``/``pip_args``: how the boot script (custom data) installs provisioner on the
    VM; ``agent_preinstalled``: the image has it in ``/opt/provisioner/venv``.

    Gangs (issue 10): proximity placement groups in the same resource group
    (:mod:`providers.azure.placement`), named by each node's VM.
    """

    name = "azure"

    def account_id(self) -> str | None:
        """The subscription launches are billed to."""
        return str(self.subscription_id) if self.subscription_id else None
