"""Alibaba Cloud: the facts the core, the agent and the sim read (see providers/facts.py)."""

from providers.facts import CloudFacts
from provisioner.core.billing import PER_SECOND

FACTS = CloudFacts(
    name="alibaba",
    display="Alibaba Cloud",
    billing=PER_SECOND,
    notice_s=120.0,
    spot_protection_s=3600.0,
    user_data_limit=32 * 1024,
    user_data_limit_encoded=False,
    metadata_base="http://100.100.100.200",
    docs="spot: 1 h protection, reclaim notice about 5 min before (metadata shows ~2 min); pay-as-you-go per second",
)
