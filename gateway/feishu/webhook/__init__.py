"""Feishu's HTTP event subscription (webhook mode): the crypto of its pushes, the checks a
push must pass, and the aiohttp server that feeds the listener's intake."""
