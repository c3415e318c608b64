"""Azure: the facts the core, the agent and the sim read (see providers/facts.py)."""

from policies.enforcement import CapEnforce
from providers.azure.errors import ERRORS
from providers.azure.notice import POLL
from providers.facts import BidFacts, CloudFacts, Credentials, NoticeSources
from provisioner.core.billing import PER_STARTED_MINUTE

FACTS = CloudFacts(
    name="azure",
    display="Azure",
    billing=PER_STARTED_MINUTE,
    notice_s=30.0,
    spot_protection_s=0.0,
    user_data_limit=64 * 1024,
    user_data_limit_encoded=False,
    metadata_base="http://169.254.169.254",
    notice=POLL,
    credentials=Credentials(
        env=(
            ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET"),
            ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_CERTIFICATE_PATH"),
            ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE"),
            ("AZURE_USERNAME", "AZURE_PASSWORD"),
        ),
        files=(
            "${AZURE_CONFIG_DIR:-~/.azure}/msal_token_cache.json",
            "${AZURE_CONFIG_DIR:-~/.azure}/azureProfile.json",
        ),
        hint="az login, or AZURE_CLIENT_ID + AZURE_TENANT_ID + AZURE_CLIENT_SECRET",
    ),
    sdk="azure-mgmt-compute",
    sdk_module="azure.mgmt.compute",
    zone_suffixes=("-1", "-2", "-3"),
    errors=ERRORS,
    bid=BidFacts(
        takes_cap=True,
        default=CapEnforce.DAEMON,
        uncapped="billingProfile.maxPrice -1: never evicted for price, charged at most pay-as-you-go",
        why=(
            "Azure Spot Virtual Machines: a max price of -1 means the VM is not evicted for "
            "price; it pays the current Spot price or the standard price, whichever is less; "
            "with a max price it is also evicted once the Spot price passes it. "
            "https://learn.microsoft.com/azure/virtual-machines/spot-vms"
        ),
    ),
    docs="Scheduled Events Preempt: at least 30 s; billed per started minute",
    notice_sources=NoticeSources(
        vm=(
            "Scheduled Events GET /metadata/scheduledevents (EventType Preempt, NotBefore): "
            "served only to the VM, at least 30 s before"
        ),
        api="",  # the API shows the VM deallocated or gone, after the eviction
        api_read=False,
        docs="https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events",
    ),
)
