"""Alibaba Cloud: the facts the core, the agent and the sim read (see providers/facts.py)."""

from policies.enforcement import CapEnforce
from providers.alibaba.errors import ERRORS
from providers.alibaba.notice import POLL
from providers.facts import BidFacts, CloudFacts, Credentials, NoticeSources
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
    notice=POLL,
    credentials=Credentials(
        env=(
            ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"),
            ("ALICLOUD_ACCESS_KEY", "ALICLOUD_SECRET_KEY"),
        ),
        files=(
            "${ALIBABA_CLOUD_CREDENTIALS_FILE}",
            "~/.alibabacloud/credentials.ini",
            "~/.alibabacloud/credentials",
            "~/.aliyun/config.json",
        ),
        hint="aliyun configure, or ALIBABA_CLOUD_ACCESS_KEY_ID + ALIBABA_CLOUD_ACCESS_KEY_SECRET",
    ),
    sdk="alibabacloud-ecs20140526",
    sdk_module="alibabacloud_ecs20140526",
    zone_suffixes=("-a", "-b", "-c"),
    errors=ERRORS,
    bid=BidFacts(
        takes_cap=True,
        default=CapEnforce.DAEMON,
        uncapped="SpotStrategy SpotAsPriceGo: bids the market price, at most the pay-as-you-go price",
        why=(
            "ECS RunInstances, SpotStrategy: SpotWithPriceLimit instances are reclaimed when "
            "the market price passes the limit as well as when stock runs short; "
            "SpotAsPriceGo follows the market price (capped at pay-as-you-go) and is reclaimed "
            "for stock only. https://www.alibabacloud.com/help/en/ecs/developer-reference/api-ecs-2014-05-26-runinstances"
        ),
    ),
    docs="spot: 1 h protection, reclaim notice about 5 min before (metadata shows ~2 min); pay-as-you-go and spot billed per second, no minimum (DescribeSpotPriceHistory reference)",
    notice_sources=NoticeSources(
        vm="metadata GET /latest/meta-data/instance/spot/termination-time (about 5 min before)",
        api=(
            "DescribeInstances OperationLocks LockReason=Recycling; the system event "
            "Instance:PreemptibleInstanceInterruption (CloudMonitor/EventBridge)"
        ),
        api_read=True,  # the Recycling lock, read as the notice while the instance runs
        docs="https://www.alibabacloud.com/help/en/ecs/user-guide/interruption-events-of-preemptible-instances",
    ),
)
