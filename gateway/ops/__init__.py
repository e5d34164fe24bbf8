"""Operating the gateway: the CLI, the demo and its terminal, processes as subprocesses, an
embedded Redis, the settings page."""
