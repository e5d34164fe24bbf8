"""Approval requests: an agent asks, a person decides on a card or with /approve, /deny.

May import: gateway.errors, gateway.feishu (outbound only), gateway.state, gateway.types.
"""
