"""Agent CLIs behind ACP, registered by name.

A `Harness` knows how its CLI starts in ACP mode, which environment
variables it may see (credentials are passed only to the agent that needs
them), how it authenticates, and its quirks. The worker environment is
sealed: its own HOME and config directory (concurrent CLIs sharing a config
file corrupt it) and only whitelisted variables.

Credentials and endpoints come from the user's environment or from a secrets
file (``AGENSH_SECRETS_FILE``: ``KEY=VALUE`` lines, ``#`` comments, an
optional ``export``), so they need not sit in the shell that starts the run.
Their values never reach a log or a trace: `redact` removes them.

CLIs are looked up on PATH, then in ``<repo>/.ci/node/bin`` where `.ci/run`
installs them from npm.
"""

from __future__ import annotations

import fcntl
import json
import logging
import re
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agensh_ray.agent.modelroute import (  # noqa: F401  (re-exported: where callers have always found them)
    MIN_SECRET_LEN, SECRET_NAME, SECRETS_FILE_VAR, ModelRoute, cache_root, read_secrets, toml_string,
)
from agensh_ray.confined import Confined
from agensh_ray.errors import HarnessError
from agensh_ray.models import GatewayEndpoint
from agensh_ray.paths import NODE_BIN

log = logging.getLogger(__name__)

BASE_ENV = (
    "PATH", "LANG", "LC_ALL", "TERM", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
)
GEMINI_REDACTS = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|AUTH|CREDENTIAL|CREDS|PRIVATE|CERT", re.I)
"""The names Gemini CLI 0.61's shell redacts (its NEVER_ALLOWED_NAME_PATTERNS), unless its allow-list names them."""


@dataclass(frozen=True)
class Harness:
    name: str
    command: tuple[str, ...]
    """argv that starts the CLI in ACP mode (argv[0] looked up on PATH, then in .ci/node/bin)."""
    env_keys: tuple[str, ...] = ()
    """Variables passed through from the user's environment or secrets (credentials, endpoints)."""
    env_defaults: dict[str, str] = field(default_factory=dict)
    """Variables always set for this CLI (e.g. offline switches); the user's value wins."""
    config_dir_var: str | None = None
    """Variable naming the CLI's config directory, pointed inside the worker's sealed HOME."""
    auth: tuple[tuple[str, str], ...] = ()
    """(ACP auth method id, variable): call `authenticate` with the first method whose variable is set."""
    credentials_hint: str = ""
    """What to set when the agent says it needs credentials."""
    shared_cache: bool = False
    """Point XDG_CACHE_HOME at a cache shared by every worker (Copilot unpacks 235 MB there, 20 s, per HOME)."""
    warm_up: tuple[str, ...] = ()
    """Arguments of one run, before the first start on this machine, that fills the shared cache."""
    compile_cache: bool = False
    """Node's compile cache (NODE_COMPILE_CACHE) lives in the shared cache, filled by one ACP start outside any
    sandbox before the first start on this machine; sandboxed agents read it read-only. Without a warm one Copilot
    CLI compiles its bundle at every start: ~50 MiB more heap and ~1 s (bench/sandbox.py)."""
    cumulative_usage: bool = False
    """The agent's PromptResponse.usage counts the whole session, not the turn (Copilot CLI 1.0)."""
    install_hint: str = ""
    model_route: ModelRoute | None = None
    """How its model is reached, for the model gateway (None: the gateway cannot stand in)."""
    builtin_model: str = ""
    """The endpoint the CLI talks to when its model route's URL variable is not set ("" if it needs no model)."""
    model_vars: tuple[str, ...] = ()
    """Variables the chosen model is set in (the first one, set by the user, is also where it is read from)."""
    default_model: str = ""
    """The model when neither --model nor the user's model variable names one ("" : the CLI needs none)."""
    config_flag: str = ""
    """The CLI's option for a config override (codex-acp: ``-c key=value``, the value read as TOML)."""
    model_key: str = ""
    """Config key of the model, for a CLI that reads it from no variable (codex-acp: ``model``)."""
    url_key: str = ""
    """Config key of the model endpoint's URL, for a CLI that ignores its URL variable (codex-acp 0.16 reads no
    OPENAI_BASE_URL; its ``openai_base_url`` key is taken from the route's URL variable)."""
    config: tuple[tuple[str, str], ...] = ()
    """Config overrides always given (key, TOML value): codex's credentials stay out of HOME and its shells."""
    home_files: tuple[tuple[str, str], ...] = ()
    """Files written into the worker's HOME before the CLI starts (path under HOME, text): its own settings."""
    acp_fs: bool = True
    """The worker offers ACP fs/* (reads and writes through the worker, with its checks). Off for Gemini CLI 0.61:
    it takes the worker's "not found" (a JSON-RPC error, not a JavaScript Error) for a failure, so through fs/* it
    could not create a file; it then uses its own file access, confined by the sandbox, its edits still asking
    the permission policy."""
    redaction_settings: str = ""
    """Gemini CLI's settings file (path under HOME): its shell redacts every variable whose name looks like a
    credential to it (KEY, TOKEN, AUTH, CERT, ... anywhere in the name: GIT_AUTHOR_NAME too) unless its
    allow-list names it; written with redaction on and the agent's variables that are no credential to us
    (SECRET_NAME) allowed, so the toolchain's settings (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, ...) reach its
    commands. Gemini CLI 0.61 drops from that list the names its patterns match (GIT_AUTHOR_* included): git's
    identity also goes in GIT_CONFIG_* variables (user.name, user.email), which it always passes on."""
    mcp_headers: bool = False
    """The MCP server is given with the worker's token in an HTTP header, not in its URL (the CLI keeps the URL in
    its logs, and sends the headers ACP gives it)."""
    notes: str = ""

    def argv(self) -> list[str]:
        exe = self.command[0]
        found = exe if os.path.isabs(exe) else shutil.which(exe)
        if not found and not os.path.isabs(exe) and (NODE_BIN / exe).is_file():
            found = str(NODE_BIN / exe)
        if not found:
            raise HarnessError(f"harness '{self.name}': '{exe}' not found on PATH. {self.install_hint}".strip())
        return [found, *self.command[1:]]

    def launch_argv(self, env: dict[str, str], model: str | None = None) -> list[str]:
        """`argv()` plus the config overrides this CLI needs: its model and, read from its URL variable in
        `env` (as the agent sees it), its endpoint."""
        out = self.argv()
        if not self.config_flag:
            return out
        pairs = list(self.config)
        if self.model_key and model:
            pairs.append((self.model_key, toml_string(model)))
        url = env.get(self.model_route.url_var) if self.model_route and self.url_key else None
        if url:
            pairs.append((self.url_key, toml_string(url)))
        for key, value in pairs:
            out += [self.config_flag, f"{key}={value}"]
        return out

    def choose_model(self, requested: str | None, secrets: dict[str, str] | None = None) -> str | None:
        """The model the agents use: `requested` (--model), else the user's first model variable, else the
        harness's default; None for a CLI that takes no model (sim, cmd:). Reads nothing for those."""
        if not (self.model_vars or self.model_key):
            return requested or None
        if requested:
            return requested
        if self.model_vars:
            src = {**os.environ, **(read_secrets() if secrets is None else secrets)}
            if src.get(self.model_vars[0]):
                return src[self.model_vars[0]]
        return self.default_model or None

    def environment(self, home: Path, extra: dict[str, str], secrets: dict[str, str] | None = None,
                    gateway: GatewayEndpoint | None = None, model: str | None = None) -> dict[str, str]:
        """The sealed environment: base whitelist + this CLI's keys + its own HOME/config dir.

        The interpreter's directory leads PATH, so the agent's `python3` is the one that built the
        task's reference program; `.ci/node/bin` ends it, so a CLI can start its own helpers.

        Through the model `gateway`, the agent gets the gateway's URL and its virtual key instead of
        the endpoint and every credential variable of the user's (they stay in the gateway's process).
        """
        env = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
        src = {**os.environ, **(read_secrets() if secrets is None else secrets)}
        env.update(self.env_defaults)
        # A `cmd:` agent is unknown to us: it gets what the secrets file holds, nothing else of the user's.
        keys = self.env_keys if self.name != "cmd" else tuple(read_secrets() if secrets is None else secrets)
        route = self.model_route if gateway is not None else None
        for k in keys:
            if k in src:
                if route is not None and (k in (route.url_var, route.key_var) or SECRET_NAME.search(k)):
                    continue
                env[k] = src[k]
        if route is not None:
            env.update(route.agent_env)
            env[route.url_var] = gateway.url
            env[route.key_var] = gateway.key
        if model:
            env.update(dict.fromkeys(self.model_vars, model))
        path = [str(Path(sys.executable).parent), *env.get("PATH", os.defpath).split(os.pathsep)]
        if NODE_BIN.is_dir():
            path.append(str(NODE_BIN))
        env["PATH"] = os.pathsep.join(dict.fromkeys(p for p in path if p))
        home.mkdir(parents=True, exist_ok=True)
        if self.home_files:  # HOME is the worker's (its agent may have left links there): written beneath it
            with Confined(home) as sealed:
                for rel, text in self.home_files:
                    sealed.write_text(rel, text)
        env["HOME"] = str(home)
        env["XDG_CONFIG_HOME"] = str(home / ".config")
        if self.shared_cache:
            env["XDG_CACHE_HOME"] = str(cache_root() / self.name)
            if self.compile_cache:
                env["NODE_COMPILE_CACHE"] = str(cache_root() / self.name / "node-compile-cache")
        if self.config_dir_var:
            config = home / f".{self.name}"
            with Confined(home) as sealed:
                os.close(sealed.open_dir(config.name, create=True))
            env[self.config_dir_var] = str(config)
        env.update(extra)
        if self.redaction_settings:
            # Its shell drops GIT_AUTHOR_* (AUTH in the name) whatever the allow-list says (Gemini CLI 0.61 filters
            # the allow-list by the same patterns); it keeps every GIT_CONFIG_* variable: the identity goes there too.
            n = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
            for key, var in (("user.name", "GIT_AUTHOR_NAME"), ("user.email", "GIT_AUTHOR_EMAIL")):
                if env.get(var):
                    env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, env[var]
                    n += 1
            if n:
                env["GIT_CONFIG_COUNT"] = str(n)
            allowed = sorted(k for k in env if GEMINI_REDACTS.search(k) and not SECRET_NAME.search(k))
            text = json.dumps({"security": {"environmentVariableRedaction": {"enabled": True, "allowed": allowed}}})
            with Confined(home) as sealed:
                sealed.write_text(self.redaction_settings, text + "\n")
        return env

    def prepare(self, env: dict[str, str], acp_start: Callable[[list[str], dict[str, str]], None] | None = None) -> None:
        """Fill the shared cache once per machine and CLI version (blocking; others wait on a file lock): the
        `warm_up` run, then, for a CLI with a compile cache, `acp_start(argv, env)` (one start in ACP mode)."""
        if not (self.warm_up and self.shared_cache):
            return
        exe = self.argv()[0]
        key = f"{exe} {os.stat(exe).st_mtime_ns}"
        cache = Path(env["XDG_CACHE_HOME"])
        cache.mkdir(parents=True, exist_ok=True)
        steps = [(".agensh-ready", lambda: subprocess.run([exe, *self.warm_up], env=env, capture_output=True,
                                                           timeout=600, check=False))]
        if self.compile_cache and acp_start is not None:
            steps.append((".agensh-compile-cache", lambda: self._warm_compile_cache(acp_start, env)))
        for name, step in steps:
            marker = cache / name
            if marker.is_file() and marker.read_text() == key:
                continue
            with open(cache / ".agensh-warm.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not (marker.is_file() and marker.read_text() == key):
                    step()
                    marker.write_text(key)

    def _warm_compile_cache(self, acp_start: Callable[[list[str], dict[str, str]], None], env: dict[str, str]) -> None:
        try:
            acp_start(self.argv(), env)
        except Exception as exc:  # a cold cache costs time and memory, not correctness
            log.warning("%s: warming its compile cache failed: %s", self.name, self.redact(str(exc), env))

    def secret_values(self, env: dict[str, str]) -> list[str]:
        """Values in `env` that are credentials (by variable name), longest first."""
        values = {v for k, v in env.items() if SECRET_NAME.search(k) and v and len(v) >= MIN_SECRET_LEN}
        return sorted(values, key=len, reverse=True)

    def redact(self, text: str, env: dict[str, str]) -> str:
        """Remove credential values from text meant for logs or traces."""
        for v in self.secret_values(env):
            text = text.replace(v, "***")
        return text

    def model_endpoints(self, env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """(name -> URL of each model endpoint set in `env`, name -> why an endpoint it needs has no URL).
        A `cmd:` agent's endpoints are its variables named *_BASE_URL."""
        names = self.url_vars(env)
        urls = {f"model ({k})": env[k] for k in names if env.get(k)}
        if urls or not self.builtin_model:
            return urls, {}
        return {}, {"model": f"{self.name} talks to {self.builtin_model} (set {' or '.join(names)} to relay "
                             "an endpoint of yours)"}

    def url_vars(self, env: dict[str, str]) -> tuple[str, ...]:
        """The variables of `env` that name this CLI's model endpoint."""
        if self.name == "cmd":
            return tuple(k for k in env if k.endswith("_BASE_URL"))
        return (self.model_route.url_var,) if self.model_route else ()

    def auth_method(self, env: dict[str, str], offered: list[str]) -> str | None:
        """The ACP auth method to call, if the agent offers one we have credentials for."""
        for method, var in self.auth:
            if method in offered and env.get(var):
                return method
        return None


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
            "COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "GH_HOST", "COPILOT_GH_HOST",
            "COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_TYPE", "COPILOT_PROVIDER_API_KEY",
            "COPILOT_PROVIDER_BEARER_TOKEN", "COPILOT_PROVIDER_HEADERS", "COPILOT_PROVIDER_WIRE_API",
            "COPILOT_PROVIDER_MODEL_ID", "COPILOT_PROVIDER_WIRE_MODEL", "COPILOT_PROVIDER_MAX_PROMPT_TOKENS",
            "COPILOT_PROVIDER_MAX_OUTPUT_TOKENS", "COPILOT_PROVIDER_AZURE_API_VERSION", "COPILOT_MODEL",
            "COPILOT_OFFLINE",
        ),
        env_defaults={"COPILOT_AUTO_UPDATE": "false", "NO_COLOR": "1"},
        config_dir_var="COPILOT_HOME",
        shared_cache=True,
        warm_up=("--version",),
        compile_cache=True,
        cumulative_usage=True,
        credentials_hint=(
            "set COPILOT_GITHUB_TOKEN (GitHub Copilot), or COPILOT_PROVIDER_BASE_URL + COPILOT_PROVIDER_API_KEY + "
            "COPILOT_MODEL for an OpenAI-compatible endpoint (COPILOT_OFFLINE=true to skip GitHub entirely)"
        ),
        install_hint="Install it with: npm install -g @github/copilot",
        model_route=ModelRoute(
            provider="openai", url_var="COPILOT_PROVIDER_BASE_URL", key_var="COPILOT_PROVIDER_API_KEY",
            default_url="https://api.openai.com/v1",
            key_vars=(("COPILOT_PROVIDER_API_KEY", "bearer"), ("COPILOT_PROVIDER_BEARER_TOKEN", "bearer")),
            needs=("COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_API_KEY", "COPILOT_PROVIDER_BEARER_TOKEN"),
            excludes=("COPILOT_PROVIDER_TYPE",),  # azure / anthropic provider types: not through the gateway yet
            agent_env=(("COPILOT_OFFLINE", "true"),),
        ),
        builtin_model="GitHub Copilot's API over HTTPS",
        model_vars=("COPILOT_MODEL",),
        default_model="gpt-4.1",
        notes="accepts only HTTP/SSE MCP servers; chooses permission options by kind; offline with COPILOT_OFFLINE",
    ),
    "claude": Harness(
        name="claude",
        command=("claude-code-acp",),
        env_keys=(
            "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_MODEL",
            "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
            "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_CUSTOM_HEADERS", "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN", "ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION",
        ),
        env_defaults={"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"},
        config_dir_var="CLAUDE_CONFIG_DIR",
        credentials_hint="set ANTHROPIC_API_KEY (and ANTHROPIC_BASE_URL for another endpoint)",
        install_hint="Install it with: npm install -g @zed-industries/claude-code-acp",
        model_route=ModelRoute(
            provider="anthropic", url_var="ANTHROPIC_BASE_URL", key_var="ANTHROPIC_API_KEY",
            default_url="https://api.anthropic.com",
            key_vars=(("ANTHROPIC_API_KEY", "x-api-key"), ("ANTHROPIC_AUTH_TOKEN", "bearer")),
            excludes=("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
        ),
        builtin_model="Anthropic's API over HTTPS",
        # Claude Code asks for its default model whatever ANTHROPIC_MODEL says: the model goes into each of its
        # model slots, so every request (side questions included) names the chosen model.
        model_vars=("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL",
                    "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL"),
        default_model="claude-sonnet-4-5",
        mcp_headers=True,
        notes="sends tool_call twice (upsert); edits files and runs shells through fs/* and terminal/*",
    ),
    "codex": Harness(
        name="codex",
        command=("codex-acp",),
        env_keys=("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY"),
        config_dir_var="CODEX_HOME",
        auth=(("codex-api-key", "CODEX_API_KEY"), ("openai-api-key", "OPENAI_API_KEY")),
        credentials_hint="set OPENAI_API_KEY or CODEX_API_KEY",
        install_hint="Install it with: npm install -g @zed-industries/codex-acp",
        # codex-acp 0.16 reads neither OPENAI_BASE_URL nor a model variable: both are config overrides.
        model_route=ModelRoute(
            provider="openai", url_var="OPENAI_BASE_URL", key_var="OPENAI_API_KEY",
            default_url="https://api.openai.com/v1",
            key_vars=(("OPENAI_API_KEY", "bearer"), ("CODEX_API_KEY", "bearer")),
        ),
        builtin_model="OpenAI's API over HTTPS",
        default_model="gpt-5-codex",
        config_flag="-c",
        model_key="model",
        url_key="openai_base_url",
        # The key stays in memory (not HOME/.codex/auth.json), no shell snapshots, and its shells drop the
        # variables named *KEY*, *SECRET*, *TOKEN* (Codex's default excludes, which it skips unless told not to).
        # Its own sandbox is off (ours confines it; its default, read-only, would refuse every edit) and it asks
        # before commands, so our permission policy judges them.
        config=(("cli_auth_credentials_store", '"ephemeral"'), ("shell_environment_policy.ignore_default_excludes",
                                                                "false"), ("features.shell_snapshot", "false"),
                ("sandbox_mode", '"danger-full-access"'), ("approval_policy", '"untrusted"')),
        notes="takes HTTP MCP only; authenticates with an env-var method",
    ),
    "gemini": Harness(
        name="gemini",
        command=("gemini", "--acp", "--skip-trust"),
        env_keys=(
            "GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI",
            "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GEMINI_MODEL",
        ),
        auth=(("gemini-api-key", "GEMINI_API_KEY"), ("vertex-ai", "GOOGLE_API_KEY")),
        credentials_hint="set GEMINI_API_KEY (or GOOGLE_API_KEY with GOOGLE_GENAI_USE_VERTEXAI=true)",
        install_hint="Install it with: npm install -g @google/gemini-cli",
        model_route=ModelRoute(
            provider="gemini", url_var="GOOGLE_GEMINI_BASE_URL", key_var="GEMINI_API_KEY",
            default_url="https://generativelanguage.googleapis.com",
            key_vars=(("GEMINI_API_KEY", "x-goog-api-key"), ("GOOGLE_API_KEY", "x-goog-api-key")),
            excludes=("GOOGLE_GENAI_USE_VERTEXAI",),
        ),
        builtin_model="Google's Gemini API over HTTPS",
        model_vars=("GEMINI_MODEL",),
        default_model="gemini-2.5-pro",
        # Its shell passes every variable on unless told to redact credentials (names with KEY, TOKEN, ...).
        redaction_settings=".gemini/settings.json",
        acp_fs=False,  # its write_file cannot create a file through fs/* (see Harness.acp_fs)
        notes="needs --skip-trust or it silently disables MCP servers; --acp (0.61; older: --experimental-acp)",
    ),
}


def gateway_decision(harness: str, setting: bool | None, secrets: dict[str, str] | None = None) -> tuple[bool, str]:
    """Whether a run's agents go through the model gateway (`setting`: the user's choice, None for auto), and
    why; raises HarnessError when it is asked for and cannot stand in for the harness's endpoint."""
    h = get_harness(harness)
    if setting is False:
        return False, "off (--no-gateway)"
    if h.model_route is None:
        if setting:
            raise HarnessError(f"harness '{h.name}' has no model endpoint the gateway can stand in for")
        return False, f"off (the {h.name} harness calls no model provider)"
    ok, why = h.model_route.applies({**os.environ, **(read_secrets() if secrets is None else secrets)})
    if not ok:
        if setting:
            raise HarnessError(f"--gateway: the gateway cannot stand in for {h.name}'s endpoint: {why}")
        return False, f"off ({why}; {h.name} reaches its provider directly)"
    return True, f"on ({h.model_route.provider} route; the agents get its URL and a virtual key)"


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
