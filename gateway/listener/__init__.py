"""The listener process: its life, its service and wiring, the per-event intake, the outbox
thread and the desk of control jobs."""
