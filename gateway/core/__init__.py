"""Plumbing both processes share: settings, errors, the message model, task names, logs,
metrics, threads, presence, the Redis client and the broker transport."""
