"""Where the project's own files are: the checkout this package was installed from.

agensh-ray runs from a checkout (`pip install -e .`): the prompts, the bundled
tasks, the docs and the agent CLIs that `.ci/run` installs sit beside the
package, and the run driver ships the same checkout to every Ray node.
"""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The checkout: agensh_ray/, actors/, services/, analysis/, prompts/, tasks/ are its folders."""
PROMPTS_DIR = PROJECT_ROOT / "prompts"
"""Every text the runtime sends to an agent (worker prompt, nudge, wind-down, hand-off ...)."""
TASKS_DIR = PROJECT_ROOT / "tasks"
"""The bundled tasks, by name."""
DOCS_DIR = PROJECT_ROOT / "docs"
NODE_BIN = PROJECT_ROOT / ".ci" / "node" / "bin"
"""Where `.ci/run` installs the agent CLIs (npm install -g --prefix .ci/node)."""
