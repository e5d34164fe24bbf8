"""The Celery app: `celery -A tasks worker` consumes every queue the gateway uses."""

from celery import Celery

app = Celery("gateway")
app.config_from_object("celeryconfig")

from tasks import turns  # noqa: E402,F401  (registers the tasks)

__all__ = ["app"]
