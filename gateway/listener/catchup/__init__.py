"""Catch-up after an outage: messages sent while no listener of an app was connected are
read back from Feishu's messages list API and fed through the listener's own intake
(docs/design.md#catch-up)."""
