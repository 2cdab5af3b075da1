"""The benchmarks: scripts run as `python bench/X.py`, a package only so that they share
bench/common.py (each puts the project root on sys.path first). Not installed."""
