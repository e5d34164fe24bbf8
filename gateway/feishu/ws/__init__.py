"""The long connection to Feishu: endpoint, wire frames, one websocket, reconnects, the
listener's connections."""
