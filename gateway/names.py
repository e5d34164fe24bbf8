"""Celery task and queue names, shared by the publisher side and the worker side."""

RUN_TURN = "gateway.run_turn"

TURNS_QUEUE = "gateway.turns"
ALL_QUEUES = (TURNS_QUEUE,)


def turn_task_id(chat_id: str, message_id: str, fence: int) -> str:
    """Readable in Flower and on the CLI: which chat, which message, which lease."""
    return f"turn:{chat_id}:{message_id}:{fence}"
