"""The worker process: one turn's runner, its heartbeat, per-chat lock handles and streamed
answers."""
