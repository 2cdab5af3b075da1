"""Where a CLI's credentials and model endpoint come from: the user's environment or the secrets file
(``AGENSH_SECRETS_FILE``), which variable names hold credentials (their values never reach a log), and how
the model gateway stands in for a CLI's endpoint (`ModelRoute`); where the CLIs' shared caches live."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from agensh_ray.errors import HarnessError

SECRETS_FILE_VAR = "AGENSH_SECRETS_FILE"

SECRET_NAME = re.compile(r"^(?!GIT_CONFIG_KEY_\d+$).*?(?:^|_)(?:KEY|TOKEN|SECRET|PASSWORD|AUTH|CREDENTIALS?|HEADERS)(?:_|$)",
                         re.IGNORECASE)
"""Variable names whose values are credentials (API_KEY, AUTH_TOKEN, ..., not GIT_AUTHOR_NAME, nor git's
GIT_CONFIG_KEY_<n>, which names a config key)."""
MIN_SECRET_LEN = 6


def read_secrets(path: str | Path | None = None) -> dict[str, str]:
    """The secrets file (`path`, else $AGENSH_SECRETS_FILE), as a dict; {} if there is none."""
    path = path or os.environ.get(SECRETS_FILE_VAR)
    if not path:
        return {}
    p = Path(path).expanduser()
    if not p.is_file():
        raise HarnessError(f"secrets file {p} ({SECRETS_FILE_VAR}) does not exist")
    out: dict[str, str] = {}
    for n, line in enumerate(p.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, sep, value = line.partition("=")
        if not sep or not key.strip().isidentifier():
            raise HarnessError(f"{p}:{n}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


@dataclass(frozen=True)
class ModelRoute:
    """How a CLI reaches its model, so that the model gateway can stand in for the endpoint: the agent gets
    the gateway's URL and a virtual key in `url_var` / `key_var`, and the gateway reads the real endpoint
    and credential from the same variables (services/gateway/upstream.py)."""

    provider: str
    """The gateway route: openai | anthropic | gemini."""
    url_var: str
    key_var: str
    default_url: str
    """The provider's public endpoint, when the user names none."""
    key_vars: tuple[tuple[str, str], ...]
    """The user's credential variables (first set wins) and how each is sent: bearer | x-api-key | x-goog-api-key."""
    needs: tuple[str, ...] = ()
    """Variables of which one must be set for the gateway to apply (default: `url_var` or a key variable)."""
    excludes: tuple[str, ...] = ()
    """Variables that take the CLI to another kind of service (Bedrock, Vertex, Azure): set to anything but
    0, false or the route's provider, the gateway is off."""
    agent_env: tuple[tuple[str, str], ...] = ()
    """Variables the agent gets when it goes through the gateway (e.g. Copilot's offline switch)."""

    def applies(self, src: dict[str, str]) -> tuple[bool, str]:
        """Whether the gateway can stand in for this CLI's endpoint as configured in `src`, and why not."""
        for var in self.excludes:
            if src.get(var) and src.get(var).lower() not in ("0", "false", self.provider):
                return False, f"{var} is set: the CLI talks to another service than a {self.provider} endpoint"
        needs = self.needs or (self.url_var, *(v for v, _ in self.key_vars))
        if not any(src.get(v) for v in needs):
            return False, f"none of {', '.join(needs)} is set"
        return True, ""


def cache_root() -> Path:
    """Caches shared by the workers of this machine: $AGENSH_CACHE_DIR, else <user cache>/agensh-ray."""
    if d := os.environ.get("AGENSH_CACHE_DIR"):
        return Path(d)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agensh-ray"


def toml_string(value: str) -> str:
    """`value` as a TOML basic string (a config override's value)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
