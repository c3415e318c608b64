"""Azure: the facts the core, the agent and the sim read (see providers/facts.py)."""

from providers.facts import CloudFacts
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
    docs="Scheduled Events Preempt: at least 30 s; billed per started minute",
)
