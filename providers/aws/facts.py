"""AWS: the facts the core, the agent and the sim read (see providers/facts.py)."""

from policies.enforcement import CapEnforce
from providers.aws.errors import ERRORS
from providers.aws.notice import POLL, REBALANCE
from providers.facts import BidFacts, CloudFacts, Credentials, NoticeSources
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
    notice=POLL,
    early=REBALANCE,
    credentials=Credentials(
        env=(
            ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"),
            ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",),
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI",),
        ),
        files=(
            "${AWS_SHARED_CREDENTIALS_FILE:-~/.aws/credentials}",
            "${AWS_CONFIG_FILE:-~/.aws/config}",
        ),
        hint="aws configure, or AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY",
    ),
    sdk="boto3",
    sdk_module="boto3",
    zone_suffixes=("a", "b", "c"),
    errors=ERRORS,
    bid=BidFacts(
        takes_cap=True,
        default=CapEnforce.DAEMON,
        uncapped="no SpotOptions.MaxPrice: the on-demand price is the most EC2 charges",
        why=(
            "EC2 User Guide, 'Spot Instance requests': if you specify a maximum price, your "
            "instances will be interrupted more frequently than if you do not specify it; "
            "without one, the default maximum is the on-demand price. "
            "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-requests.html"
        ),
    ),
    docs="EC2 spot two-minute notice; per-second billing with a 60 s minimum for Linux",
    notice_sources=NoticeSources(
        vm="IMDS GET /latest/meta-data/spot/instance-action (two minutes before; IMDSv2 token)",
        api=(
            "EventBridge event 'EC2 Spot Instance Interruption Warning' (delivered to a target "
            "you set up, e.g. an SQS queue); DescribeSpotInstanceRequests status "
            "marked-for-termination"
        ),
        api_read=False,
        docs=(
            "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html"
        ),
    ),
)
