"""Approval requests: an agent asks, a person decides on a card or with /approve, /deny.
"""
