"""The worker host (a WorkerActor's logic, plain): host.py, one worker's turns (turns.py), its clone
(workdir.py) and the tools backend (backend.py)."""

from agensh_ray.worker.host import WorkerHost

__all__ = ["WorkerHost"]
