"""Run a command inside a worker's running sandbox, as the agent's own commands run.

    python -I -S enter.py [--cgroup=PROCS_FILE]... PID CWD -- ARGV...

PID is a process inside the sandbox (bwrap's PID 1 there, as the host sees it).
The command joins its mount, PID, network, IPC, UTS and cgroup namespaces and its
root (`nsenter`), then every capability is dropped and no_new_privs set
(`setpriv`), and it runs in CWD. Before that it moves itself into the
sandbox's cgroups (each `--cgroup` names a group's `cgroup.procs`) and takes
the sandbox's rlimits (those limits.py sets, read off PID), so a terminal
counts against the worker's limits like the agent's own commands.

Run as root, bubblewrap makes no user namespace, and nsenter joins the others
directly. Run as another user, bubblewrap makes two: an outer one that owns
the sandbox's namespaces (where the user is root, to set up the mounts) and an
inner one the agent runs in (where it is itself, with no capabilities). Joining
the sandbox's namespaces needs the outer one (the namespaces belong to it:
`nsenter --all` fails there with "Operation not permitted"), and the command
must end in the inner one, so that on exec it holds no capability, exactly like
the agent. So: nsenter into the outer user namespace and the others, then a
second nsenter into the inner one, then setpriv.

Standard library only, run by path with -I -S (like relay.py): it starts in
~20 ms and imports nothing of the project or of the agent's environment.
"""

from __future__ import annotations

import fcntl
import os
import resource
import sys

NS_GET_USERNS = 0xB701
"""ioctl(2) on a namespace fd: an fd of the user namespace that owns it (linux/nsfs.h, _IO(0xb7, 0x1))."""
RLIMITS = (resource.RLIMIT_FSIZE, resource.RLIMIT_DATA, resource.RLIMIT_NPROC)
"""The sandbox's limits a terminal takes on (agensh_ray/agent/limits.py)."""
NAMESPACES = (("cgroup", "cgroup"), ("ipc", "ipc"), ("uts", "uts"), ("net", "net"), ("pid", "pid"), ("mnt", "mount"))


def _ino(path_or_fd) -> int:
    return os.stat(path_or_fd).st_ino


def argv_for(pid: str, cwd: str, command: list[str]) -> tuple[list[str], list[int]]:
    """The nsenter / setpriv command line for `command`, and the fds it must inherit."""
    ns = f"/proc/{pid}/ns"
    own_user = _ino("/proc/self/ns/user")
    mnt = os.open(f"{ns}/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        owner = fcntl.ioctl(mnt, NS_GET_USERNS)
    finally:
        os.close(mnt)
    inner = os.open(f"{ns}/user", os.O_RDONLY | os.O_CLOEXEC)
    keep: list[int] = []
    out = ["nsenter", "--target", pid, "--preserve-credentials"]
    if _ino(owner) != own_user:
        out.append(f"--user=/proc/self/fd/{owner}")
        keep.append(owner)
    else:
        os.close(owner)
    out += [f"--{flag}={ns}/{name}" for name, flag in NAMESPACES
            if _ino(f"{ns}/{name}") != _ino(f"/proc/self/ns/{name}")]
    out += ["--root", "--wd", "--"]
    if _ino(inner) not in (own_user, *(_ino(fd) for fd in keep)):
        # /proc/self inside the sandbox is the sandbox's own /proc, where the inherited fd is found all the same.
        out += ["nsenter", f"--user=/proc/self/fd/{inner}", "--preserve-credentials", "--"]
        keep.append(inner)
    else:
        os.close(inner)
    out += ["setpriv", "--no-new-privs", "--inh-caps=-all"]
    if not keep and os.geteuid() == 0:
        out.append("--bounding-set=-all")  # root, no user namespace: drop the bounding set too (else exec drops all)
    out += ["--", "env", "-C", cwd, "--", *command]
    return out, keep


def join_limits(pid: str, procs_files: list[str]) -> None:
    """Into the sandbox's cgroups and under its rlimits (OSError if that cannot be)."""
    for path in procs_files:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    for r in RLIMITS:
        soft, hard = resource.prlimit(int(pid), r)
        if (soft, hard) != resource.getrlimit(r):
            resource.setrlimit(r, (soft, hard))


def main(argv: list[str]) -> int:
    cgroups = []
    while argv and argv[0].startswith("--cgroup="):  # options before PID only: the command's own are its own
        cgroups.append(argv.pop(0).partition("=")[2])
    if len(argv) < 4 or argv[2] != "--":
        print("usage: enter.py [--cgroup=PROCS_FILE]... PID CWD -- ARGV...", file=sys.stderr)
        return 2
    try:
        join_limits(argv[0], cgroups)
    except (OSError, ValueError) as exc:
        print(f"enter.py: cannot take on the limits of the sandbox of process {argv[0]}: {exc}", file=sys.stderr)
        return 125
    try:
        command, keep = argv_for(argv[0], argv[1], argv[3:])
    except OSError as exc:
        print(f"enter.py: the sandbox of process {argv[0]} is gone: {exc}", file=sys.stderr)
        return 125
    for fd in keep:
        os.set_inheritable(fd, True)
    os.execvp(command[0], command)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
