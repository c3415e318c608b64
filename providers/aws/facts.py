"""AWS: the facts the core, the agent and the sim read (see providers/facts.py)."""

from providers.facts import CloudFacts
from provisioner.core.billing import PER_SECOND_60S_MINIMUM

FACTS = CloudFacts(
    name="aws",
    display="AWS",
    billing=PER_SECOND_60S_MINIMUM,
    notice_s=120.0,
    spot_protection_s=0.0,
    user_data_limit=16 * 1024,
    user_data_limit_encoded=False,
    metadata_base="http://169.254.169.254",
    docs="EC2 spot two-minute notice; per-second billing with a 60 s minimum for Linux",
)
