"""A chat's durable state in Redis: inbox, lease, fence, stop flag, answer, control jobs.

Changed only by the Lua scripts in `lua/`, one per transition. May import `gateway.core.model`,
`gateway.core.errors` and redis; never Celery, Feishu or the agents (those are passed in).
"""
