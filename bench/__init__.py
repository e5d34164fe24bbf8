"""bench/: the gateway measured against raw Celery and the bare SDK, in one run.

`python -m bench` (see the README). Imports gateway.* and the product's celeryconfig; nothing
in gateway/ imports bench/.
"""
