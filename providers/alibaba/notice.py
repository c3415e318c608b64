"""Alibaba Cloud: the spot termination time in the instance metadata, read by the agent.

In hardened mode ``PUT /latest/api/token`` (``X-aliyun-ecs-metadata-token-ttl-seconds``) gives
a token sent as ``X-aliyun-ecs-metadata-token``; in normal mode the ``PUT`` answers 404/405 and
no token is needed. ``GET /latest/meta-data/instance/spot/termination-time``: 404 = no notice,
else ``2015-01-05T18:02:00Z``; 401/403: the token expired.
"""

from __future__ import annotations

from providers.notice import NoticePoll, TokenStep, parse_termination_time

NOTICE_PATH = "/latest/meta-data/instance/spot/termination-time"

POLL = NoticePoll(
    path=NOTICE_PATH,
    parse=parse_termination_time,
    token=TokenStep(
        path="/latest/api/token",
        ttl_header="X-aliyun-ecs-metadata-token-ttl-seconds",
        header="X-aliyun-ecs-metadata-token",
        optional=True,
        expired=(401, 403),
    ),
    formats="404 = none; 2015-01-05T18:02:00Z",
)
