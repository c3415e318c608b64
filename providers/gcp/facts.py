"""Google Cloud: the facts the core, the agent and the sim read (see providers/facts.py)."""

from providers.facts import CloudFacts
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
    docs="Spot VM preemption: 30 s notice; per-second billing, 1 minute minimum",
)
