"""What comes in from Feishu: events decoded, message content, who is admitted, what a worker
adds before its agent reads."""
