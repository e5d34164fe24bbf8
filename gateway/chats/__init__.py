"""A chat's durable state in Redis: inbox, lease, fence, stop flag, answer, control jobs.

Changed only by the Lua scripts in `lua/`, one per transition. Celery, Feishu and the agents
are passed in.
"""
