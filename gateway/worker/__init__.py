"""The worker process: its wiring and Celery signals, one turn's runner, its heartbeat,
in-process turn handles and streamed answers."""
