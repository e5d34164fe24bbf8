"""The listener process: its service, the per-event intake, the outbox thread and the control
desk."""
