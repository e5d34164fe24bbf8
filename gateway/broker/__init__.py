"""The one seam to Celery and its broker: task and queue names, publishing turns and the
low-priority tasks, the bounded release queue, kombu's Redis transport fixed for outages,
and the Celery settings celeryconfig.py reads."""
