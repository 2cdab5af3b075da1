"""One worker's agent behind ACP: the CLI registry (harness.py), its process (process.py), the
workdir-confined client (client.py), the session facade (session.py, mux.py) and the hand-off
summary after a crash (handoff.py)."""
