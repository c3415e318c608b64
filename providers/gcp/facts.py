"""Google Cloud: the facts the core, the agent and the sim read (see providers/facts.py)."""

from policies.enforcement import CapEnforce
from providers.facts import BidFacts, CloudFacts, Credentials, NoticeSources
from providers.gcp.errors import ERRORS
from providers.gcp.notice import POLL
from provisioner.core.billing import PER_SECOND_60S_MINIMUM

FACTS = CloudFacts(
    name="gcp",
    display="Google Cloud",
    billing=PER_SECOND_60S_MINIMUM,
    notice_s=30.0,
    spot_protection_s=0.0,
    user_data_limit=256 * 1024,
    user_data_limit_encoded=False,
    metadata_base="http://metadata.google.internal",
    notice=POLL,
    credentials=Credentials(
        env=(),
        files=(
            "${GOOGLE_APPLICATION_CREDENTIALS}",
            "${CLOUDSDK_CONFIG:-~/.config/gcloud}/application_default_credentials.json",
        ),
        hint="gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS",
    ),
    sdk="google-cloud-compute",
    sdk_module="google.cloud.compute_v1",
    zone_suffixes=("-a", "-b", "-c"),
    errors=ERRORS,
    bid=BidFacts(
        takes_cap=False,
        default=CapEnforce.DAEMON,
        uncapped="no bid: a Spot VM pays the Spot price of the day",
        why=(
            "Compute Engine Spot VMs take no maximum price (scheduling.provisioningModel SPOT "
            "has no bid field); the price is Google's and changes at most once a day. "
            "https://cloud.google.com/compute/docs/instances/spot"
        ),
    ),
    docs="Spot VM preemption: 30 s notice; per-second billing, 1 minute minimum",
    notice_sources=NoticeSources(
        vm=(
            "metadata GET /computeMetadata/v1/instance/preempted (TRUE), then the ACPI soft "
            "off: about 30 s"
        ),
        api="",  # the zone operation compute.instances.preempted is the preemption itself
        api_read=False,
        docs="https://cloud.google.com/compute/docs/instances/spot#preemption-process",
    ),
)
