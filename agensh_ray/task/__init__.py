"""Tasks from three sources behind one interface (`Task.load`), scored by ProgramBench's own code:
ProgramBench's catalogue (`programbench:<instance_id>`), any folder in ProgramBench's task format,
and the bundled ones (`tasks/<name>/`, e.g. textkit). README.md of this folder lists the modules."""

from agensh_ray.task.base import CATALOGUE_PREFIX, REFERENCE_DIR, Feature, Task
from agensh_ray.task.evaluate import ScoreSummary
from agensh_ray.task.local import LocalTask, known_tasks

__all__ = ["CATALOGUE_PREFIX", "REFERENCE_DIR", "Feature", "LocalTask", "ScoreSummary", "Task", "known_tasks"]
