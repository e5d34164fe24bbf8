"""What goes out to Feishu: the OpenAPI client, sending with retries, rendering, chunking,
reactions, the send quota."""
