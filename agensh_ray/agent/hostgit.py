"""git that the host runs on a repository a worker controls (its clone, whose `.git` and HOME its agent writes),
so that nothing of that repository runs on the host.

Two layers, both always on when the run is sandboxed:

1. The sandbox (`sandboxed_argv`): the git command runs in a one-shot bubblewrap sandbox made like the agent's
   (agensh_ray/agent/sandbox.py): only the clone writable (its `reference/` still read-only), the toolchain
   read-only, the run folder covered, no network, a private empty HOME and /tmp, no capabilities. Whatever git
   is made to run there (a filter or diff driver of any name, which no command-line switch can neutralise) runs
   with exactly the agent's own powers, over the agent's own clone.
2. git's own switches (`INERT_CONFIG`, `inert_env`), which win over anything a repository's configuration says:
   no fsmonitor, no hooks (`core.hooksPath=/dev/null` hides `.git/hooks` too), no ssh command, editor, pager,
   askpass, credential helper or signing program, no external diff, no user or system configuration or
   attributes (the worker's HOME is the agent's), no transport (`protocol.allow=never`: `remote.*.uploadpack`,
   `ext::` and remote helpers need one), no submodule recursion, no automatic gc; and the repository and its
   work tree named on the command line (`--git-dir`, `--work-tree`), so `core.worktree` cannot point git at a
   host folder. Named git commands only (an alias never shadows a builtin).

What the switches cannot reach are the drivers a repository names by attribute: `filter.<name>.clean/smudge/
process`, `diff.<name>.textconv/command` and `merge.<name>.driver`, and whatever an `include.path` pulls in. Only
the sandbox contains those; with the sandbox off (`RunConfig.sandbox.enabled = False`) they run on the host with
the host's powers, which the unsandboxed agent has anyway: the run chose no containment.

Commands that need the network (the seed mirror's fetch from the forge) or the host's disk (a clone made from the
host's seed) run on the host with `inert_env` and `INERT_CONFIG` minus `protocol.allow`: every file git reads
then is the host's own (the seed, git's templates, a config git has just written), and a pushed tree's
`.gitattributes` names drivers nothing defines.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from agensh_ray.agent.sandbox import SandboxPolicy, bwrap_argv

INERT_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.sshCommand", "false"),
    ("core.editor", ":"),
    ("core.pager", "cat"),
    ("core.askPass", ""),
    ("core.attributesFile", "/dev/null"),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("gpg.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("submodule.recurse", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
"""`git -c` switches naming every program a configuration can make git run by a fixed key (command-line
configuration wins over the repository's)."""
NO_TRANSPORT = ("protocol.allow", "never")
"""For commands on a clone, which never fetch nor push: no remote's upload-pack, ssh, ext:: or helper runs."""
SANDBOX_HOME = "/tmp"
"""HOME inside the one-shot sandbox: its private, empty /tmp."""


def inert_env(base: dict[str, str]) -> dict[str, str]:
    """`base` (identity, PATH, ...) with git told to read no user or system configuration or attributes and to
    start no editor, pager or password prompt; nothing inherited from the host's own environment."""
    drop = ("GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_EXEC_PATH",
            "GIT_SSH", "GIT_SSH_COMMAND", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_EDITOR",
            "GIT_PAGER", "GIT_TEMPLATE_DIR", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_OBJECT_DIRECTORY")
    env = {k: v for k, v in base.items() if k not in drop and not k.startswith("GIT_CONFIG_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1", GIT_ATTR_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0",
               GIT_EDITOR=":", GIT_SEQUENCE_EDITOR=":", GIT_PAGER="cat", GIT_ASKPASS="", SSH_ASKPASS="",
               GIT_NO_REPLACE_OBJECTS="1")
    return env


def config_args(transport: bool) -> list[str]:
    out = []
    for key, value in INERT_CONFIG + (() if transport else (NO_TRANSPORT,)):
        out += ["-c", f"{key}={value}"]
    return out


def git_binary() -> str:
    """git by absolute path (the sandbox binds its install prefix, and a relative argv[0] would bind the cwd)."""
    return shutil.which("git") or "/usr/bin/git"


def clone_argv(workdir: Path, args: list[str]) -> list[str]:
    """`git <args>` on the clone at `workdir`, inert: its .git and work tree named, every fixed-key program off."""
    workdir = Path(workdir).absolute()
    return [git_binary(), "--no-pager", f"--git-dir={workdir / '.git'}", f"--work-tree={workdir}",
            *config_args(transport=False), *args]


def sandboxed_argv(workdir: Path, argv: list[str], env: dict[str, str], run_dir: Path | None,
                   read_only_inside: list[Path] = ()) -> list[str]:
    """`argv` (a git command on the clone at `workdir`) inside a one-shot sandbox like its agent's: the clone the
    only writable folder (`read_only_inside`, e.g. its reference/, bound read-only over it), the toolchain
    read-only, `run_dir` covered, no network, no capabilities."""
    workdir = Path(workdir).absolute()
    policy = SandboxPolicy.build(argv=argv, env=env, writable=[workdir], chdir=workdir, endpoints={},
                                 hidden=[run_dir] if run_dir is not None else [],
                                 execute_only=list(read_only_inside), hostname="agensh-git")
    return bwrap_argv(policy, argv, relay_dir=None)


def run_on_clone(workdir: Path, args: list[str], env: dict[str, str], *, sandboxed: bool, run_dir: Path | None,
                 read_only_inside: list[Path] = (), timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `git <args>` on the clone at `workdir`: never raises for git's exit status or a timeout (exit 124),
    only OSError. In its sandbox when `sandboxed` (with a private empty HOME), inert either way."""
    env = inert_env(env)
    argv = clone_argv(workdir, args)
    if sandboxed:
        env["HOME"] = SANDBOX_HOME
        env.pop("XDG_CONFIG_HOME", None)
        argv = sandboxed_argv(workdir, argv, env, run_dir, read_only_inside)
    else:
        env.pop("XDG_CONFIG_HOME", None)
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout,
                              cwd=str(workdir) if Path(workdir).is_dir() else None, check=False)
    except subprocess.TimeoutExpired:  # a filter that never ends: killed with its sandbox (--die-with-parent)
        return subprocess.CompletedProcess(argv, 124, "", f"git {args[0]} timed out after {timeout:.0f} s")


def host_argv(args: list[str]) -> list[str]:
    """`git <args>` run on the host on repositories the host made (the seed, a clone from it, the checkpoint's
    clone): every fixed-key program off, transports allowed."""
    return [git_binary(), "--no-pager", *config_args(transport=True), *args]


def url_credentials(url: str) -> tuple[str, dict[str, str]]:
    """`url` without its user and token, and the environment that gives them to git as a Basic-auth header:
    git writes the URL a repository is cloned from into its config (where a token would outlive the run); a
    header given through the environment it writes nowhere, nor shows in the process list."""
    u = urlsplit(url)
    if u.username is None and u.password is None:
        return url, {}
    basic = base64.b64encode(f"{unquote(u.username or '')}:{unquote(u.password or '')}".encode()).decode()
    bare = urlunsplit((u.scheme, u.netloc.rpartition("@")[2], u.path, u.query, u.fragment))
    return bare, {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                  "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}
