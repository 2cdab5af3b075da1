"""A Ray cluster of separate hosts on one machine, for running `ray up` for real in a test.

`sandbox.LoopbackCluster` builds it; `host.sh` is PID 1 of each host; `on_head.py` runs on the
head through `ray exec`.
"""
