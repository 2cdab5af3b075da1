"""Tasks from three sources behind one interface (`Task.load`), scored by ProgramBench's own code:
ProgramBench's catalogue (`programbench:<instance_id>`), any folder in ProgramBench's task format,
and the bundled ones (`tasks/<name>/`, e.g. textkit). README.md of this folder lists the modules.

The names below load on first use: `agensh_ray.task.reference` (what the ACP client imports) must
not pull in the programbench package."""

from importlib import import_module

_WHERE = {
    "Task": "base", "Feature": "base", "CATALOGUE_PREFIX": "base",
    "ScoreSummary": "evaluate", "LocalTask": "local", "known_tasks": "local",
    "REFERENCE_DIR": "reference",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
