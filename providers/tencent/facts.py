"""Tencent Cloud: the facts the core, the agent and the sim read (see providers/facts.py)."""

from policies.enforcement import CapEnforce
from providers.facts import BidFacts, CloudFacts, Credentials, NoticeSources
from providers.tencent.errors import ERRORS
from providers.tencent.notice import POLL
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
    notice=POLL,
    credentials=Credentials(
        env=(("TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY"),),
        files=(
            "~/.tencentcloud/credentials",
            "/etc/tencentcloud/credentials",
        ),
        hint="tccli configure, or TENCENTCLOUD_SECRET_ID + TENCENTCLOUD_SECRET_KEY",
    ),
    sdk="tencentcloud-sdk-python-cvm",
    sdk_module="tencentcloud.cvm",
    zone_suffixes=("-1", "-2", "-3"),
    errors=ERRORS,
    bid=BidFacts(
        takes_cap=True,
        default=CapEnforce.CLOUD,
        uncapped="SpotOptions.MaxPrice at the pay-as-you-go price (Tencent takes no spot launch without one)",
        why=(
            "CVM RunInstances, InstanceMarketOptions.SpotOptions.MaxPrice is required for a "
            "spot launch, so a bid goes on the wire either way: the policy's cap is sent. "
            "https://www.tencentcloud.com/document/api/213/15730"
        ),
    ),
    docs="spot reclaim notice about 2 min; pay-as-you-go and spot billed per second, settled hourly, no minimum; UserData 16 KB base64",
    notice_sources=NoticeSources(
        vm="metadata GET /latest/meta-data/spot/termination-time (about 2 min before)",
        api="",  # DescribeInstances shows the instance once it is reclaimed
        api_read=False,
        docs="https://www.tencentcloud.com/document/product/213/32487",
    ),
)
