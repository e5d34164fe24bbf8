"""Celery beat has the bot post a reminder (docs/operating.md#messages-the-bot-starts).

Run it beside the gateway's workers, with the same settings (REDIS_URL and the rest):

    PYTHONPATH=docs/examples celery -A reminders beat -s /var/lib/gateway/beat-schedule

Every weekday at 9:55 (the beat's time zone, Celery's `timezone` setting: UTC unless set)
the bot posts the stand-up reminder to REMINDER_CHAT. Each run is its own task, and a task
run twice (a worker killed mid-send, a broker redelivery) posts once: with no `key`, the
task's id is its idempotency key. A schedule that must post at most once a day whatever
happens gives a key of its own instead (`kwargs={"key": "standup-2026-12-07"}` from a
task that computes it). REMINDER_EVERY_S, when set, posts every that many seconds instead
(the test runs it so).
"""

from __future__ import annotations

import os
from datetime import timedelta

from celery.schedules import crontab

from tasks import app

CHAT = os.environ.get("REMINDER_CHAT", "oc_team")
every_s = float(os.environ.get("REMINDER_EVERY_S", "0"))

app.conf.beat_schedule = {
    "stand-up reminder": {
        "task": "gateway.post_message",
        "schedule": timedelta(seconds=every_s) if every_s > 0
        else crontab(hour=9, minute=55, day_of_week="mon-fri"),
        "args": (CHAT, "**Stand-up** in 5 minutes: what did you finish, what is next?"),
    },
}
