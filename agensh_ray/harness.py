"""Agent CLIs behind ACP, registered by name.

A `Harness` knows how its CLI starts in ACP mode, which environment
variables it may see (credentials are passed only to the agent that needs
them), and its quirks. The worker environment is sealed: its own HOME and
config directory (concurrent CLIs sharing a config file corrupt it) and only
whitelisted variables.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

BASE_ENV = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS")


class HarnessError(ValueError):
    pass


@dataclass(frozen=True)
class Harness:
    name: str
    command: tuple[str, ...]
    """argv that starts the CLI in ACP mode (argv[0] looked up on PATH)."""
    env_keys: tuple[str, ...] = ()
    """Variables passed through from the user's environment or secrets (credentials, endpoints)."""
    env_defaults: dict[str, str] = field(default_factory=dict)
    """Variables always set for this CLI (e.g. offline switches)."""
    config_dir_var: str | None = None
    """Variable naming the CLI's config directory, pointed inside the worker's sealed HOME."""
    install_hint: str = ""
    default_deny: tuple[str, ...] = ("rm -rf /", "git push --force origin main", "git push origin main")
    notes: str = ""

    def argv(self) -> list[str]:
        exe = self.command[0]
        found = exe if os.path.isabs(exe) else shutil.which(exe)
        if not found:
            raise HarnessError(f"harness '{self.name}': '{exe}' not found on PATH. {self.install_hint}".strip())
        return [found, *self.command[1:]]

    def environment(self, home: Path, extra: dict[str, str], secrets: dict[str, str] | None = None) -> dict[str, str]:
        """The sealed environment: base whitelist + this CLI's keys + its own HOME/config dir."""
        env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
        src = {**os.environ, **(secrets or {})}
        for k in self.env_keys:
            if k in src:
                env[k] = src[k]
        env.update(self.env_defaults)
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
        env["XDG_CONFIG_HOME"] = str(home / ".config")
        if self.config_dir_var:
            env[self.config_dir_var] = str(home / f".{self.name}")
            (home / f".{self.name}").mkdir(parents=True, exist_ok=True)
        env.update(extra)
        return env

    def redact(self, text: str, env: dict[str, str]) -> str:
        """Remove credential values from text meant for logs or traces."""
        for k in self.env_keys:
            v = env.get(k)
            if v and len(v) >= 6 and ("KEY" in k or "TOKEN" in k or "SECRET" in k):
                text = text.replace(v, "***")
        return text


HARNESSES: dict[str, Harness] = {
    "sim": Harness(
        name="sim",
        command=(sys.executable, "-m", "agensh_ray.sim"),
        env_keys=("PYTHONPATH",),
        notes="the built-in simulated agent: a real ACP subprocess, deterministic given the seed",
    ),
    "copilot": Harness(
        name="copilot",
        command=("copilot", "--acp", "--no-auto-update"),
        env_keys=(
            "COPILOT_GITHUB_TOKEN",
            "GH_TOKEN",
            "GITHUB_TOKEN",
            "COPILOT_PROVIDER_BASE_URL",
            "COPILOT_PROVIDER_API_KEY",
            "COPILOT_MODEL",
            "COPILOT_OFFLINE",
        ),
        config_dir_var="COPILOT_HOME",
        install_hint="Install it with: npm install -g @github/copilot",
        notes="accepts only HTTP/SSE MCP servers; chooses permission options by kind",
    ),
    "claude": Harness(
        name="claude",
        command=("claude-code-acp",),
        env_keys=("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_MODEL"),
        config_dir_var="CLAUDE_CONFIG_DIR",
        install_hint="Install it with: npm install -g @zed-industries/claude-code-acp",
        notes="sends tool_call twice (upsert); edits files and runs shells through fs/* and terminal/*",
    ),
    "codex": Harness(
        name="codex",
        command=("codex-acp",),
        env_keys=("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY"),
        config_dir_var="CODEX_HOME",
        install_hint="Install it with: npm install -g @zed-industries/codex-acp",
        notes="takes HTTP MCP only",
    ),
    "gemini": Harness(
        name="gemini",
        command=("gemini", "--experimental-acp", "--skip-trust"),
        env_keys=("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL"),
        install_hint="Install it with: npm install -g @google/gemini-cli",
        notes="needs --skip-trust or it silently disables MCP servers",
    ),
}


def get_harness(name: str) -> Harness:
    """A registered harness, or `cmd:<command line>` for any other ACP agent."""
    if name.startswith("cmd:"):
        argv = tuple(shlex.split(name[4:]))
        if not argv:
            raise HarnessError("harness 'cmd:' needs a command line, e.g. cmd:my-agent --acp")
        return Harness(name="cmd", command=argv)
    try:
        return HARNESSES[name]
    except KeyError:
        known = ", ".join([*HARNESSES, "cmd:<command line>"])
        raise HarnessError(f"unknown harness '{name}'; known harnesses: {known}") from None
