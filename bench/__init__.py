"""bench/: the gateway measured against raw Celery and the bare SDK, in one run.

`python -m bench` (see docs/performance.md). Imports gateway.* and the product's
celeryconfig; nothing in gateway/ imports bench/.
"""
