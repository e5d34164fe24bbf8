"""kombu's Redis transport, with a connection close that closes every channel.

Workaround for kombu 5.7.0 + celery 5.7.0 (no fixed release yet). When Redis dies, celery
5.7.0's consumer calls `connection.collect()` and then `connection.close()` (celery PR
#10242). kombu's `close_connection` stops at the first channel whose close raises (the
pending BRPOP read, a fanout queue_delete on a dead server), so the other channels stay
half open while `collect()` detaches the transport (`transport.client = None`); the later
`close()` closes the default channel again, restores its unacked messages through a new
pool built from `transport.client`, and the worker dies for good with
`AttributeError: 'NoneType' object has no attribute 'hostname'` (in about 5 % of Redis
outages that hit a running turn). Closing every channel while the transport is still
attached makes the later close a no-op. Only the public `close_connection` is overridden.
Enabled by `broker_transport` in celeryconfig.py for redis:// URLs.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis

logger = logging.getLogger(__name__)


class Transport(redis.Transport):
    def close_connection(self, connection: Any) -> Any:
        # Each failed attempt has already dropped the channel whose close() raised, so the
        # next one goes on with the others; a channel can sit in both of kombu's channel
        # lists, hence the bound.
        for _ in range(2 * len(self.channels) + 1):
            try:
                return super().close_connection(connection)  # type: ignore[no-untyped-call]
            except self.connection_errors + self.channel_errors as error:
                logger.debug("closing a channel of a lost Redis connection: %r", error)
        return None
