"""Tencent Cloud: the facts the core, the agent and the sim read (see providers/facts.py)."""

from providers.facts import CloudFacts
from provisioner.core.billing import PER_SECOND

FACTS = CloudFacts(
    name="tencent",
    display="Tencent Cloud",
    billing=PER_SECOND,
    notice_s=120.0,
    spot_protection_s=0.0,
    user_data_limit=16 * 1024,
    user_data_limit_encoded=True,
    metadata_base="http://metadata.tencentyun.com",
    docs="spot reclaim notice about 2 min; pay-as-you-go per second; UserData 16 KB base64",
)
