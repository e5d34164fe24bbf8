"""Approval requests: an agent asks, a person decides on a card or with /approve, /deny.

May import: gateway.core.errors, gateway.feishu (outbound only), gateway.chats, gateway.core.model.
"""
