"""The built-in simulated agent (`--harness sim`): a real ACP subprocess. See agent.py."""
