"""The listener's control desk: commands and notices on a few threads of their own.

Cancelling waits up to GATEWAY_CANCEL_TIMEOUT, so it runs here: never on the SDK loop,
never in a Celery worker slot (which a busy pool may not have), and replies go out
directly, so the user hears back even when every worker is busy.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

from gateway.cancel import Canceller
from gateway.errors import GatewayError
from gateway.feishu.outbound import Outbound, reply_uuid
from gateway.types import Message

logger = logging.getLogger(__name__)


class ControlDesk:
    def __init__(self, canceller: Canceller, outbound: Outbound, threads: int = 4) -> None:
        self._canceller = canceller
        self._outbound = outbound
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="gateway-control")

    def command(self, message: Message, command: str) -> Future[None]:
        return self._pool.submit(self._run_command, message, command)

    def notice(self, message: Message, text: str, purpose: str) -> Future[None]:
        return self._pool.submit(self._say, message, text, purpose)

    def stop(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)

    def _run_command(self, message: Message, command: str) -> None:
        try:
            result = self._canceller.cancel(message.chat_id, new_session=command == "new")
        except Exception:  # a control thread's boundary: log and tell the user
            logger.exception("/%s in chat %s failed", command, message.chat_id)
            self._say(message, "Sorry, that command failed; please try again.", "command")
            return
        self._say(message, result.user_reply(), "command")

    def _say(self, message: Message, text: str, purpose: str) -> None:
        try:
            self._outbound.reply_text(message.message_id, text,
                                      uuid=reply_uuid(message.message_id, purpose))
        except GatewayError as error:
            logger.error("%s reply to %s in chat %s not delivered: %s", purpose,
                         message.message_id, message.chat_id, error)
