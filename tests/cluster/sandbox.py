"""Separate cluster hosts on one machine, to run `ray up` / `ray exec` / `ray rsync-down` /
`ray down` for real, with no cloud and without touching anything else on the machine.

`ray stop` (run by the cluster's start commands and by `ray down`) kills every Ray process it can
see, so nothing here may share a process table with the machine. The whole cluster lives in a
sandbox: its own PID, mount and network namespaces (`unshare`), whose PID 1 is this file's
`inside()`. Killing that process (by its pid) ends everything the sandbox started. Inside it:

- each host is a nested network + PID + mount + UTS namespace (`host.sh`): its own address on a
  bridge, its own process table (its `ray stop` sees only its own processes), its own home
  (/home/agensh), /tmp and /run, and an sshd bound to its address;
- the hosts share /mnt/agensh, as cluster hosts share an NFS mount;
- the user `agensh` exists only in the sandbox (private copies of /etc/passwd, group, shadow);
- the hosts reach the package registries (their setup commands install from them) through
  slirp4netns, a user-mode network stack running outside as an ordinary process, and NAT;
- the client side (`ray up` and friends) runs in the sandbox too, with its own HOME (root's home
  in the sandbox's passwd, since ssh reads `~` from there) and temporary folders;
- the hosts trust the CA bundles this machine's environment names (a machine whose TLS goes
  through a proxy with its own CA), through sshd's SetEnv.

Why not 127.0.0.x aliases in one network namespace: Ray names a node by the address its host
routes from, so hosts sharing one network namespace register under the same or a wrong address
(and their fixed ports, 6379 and others, collide, with each other and with Ray instances of
other users of the machine). Each host here has its own network namespace and address on a
bridge that only the sandbox has, which is what separate machines look like to Ray.

Before the cluster starts, the sandbox checks that it cannot see a decoy process started outside
(a copy of `sleep` named `raylet`, which `ray stop` would kill if it could see it); the decoy
must still be alive at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SUBNET = "10.19.0"  # the hosts' bridge inside the sandbox; nothing outside the sandbox routes to it
GATEWAY = f"{SUBNET}.1"
UID = GID = 4219  # `agensh`, known only inside the sandbox
INSIDE_WORK = "/run/agensh/work"  # where the sandbox sees the work folder
TOOLS = ("unshare", "ip", "nft", "slirp4netns", "ssh", "ssh-keygen", "rsync", "bash", "python3.11", "node", "npm")


def host_address(i: int) -> str:
    return f"{SUBNET}.{10 + i}"


def unavailable() -> str | None:
    """Why a sandboxed cluster cannot run on this machine, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux namespaces"
    if os.geteuid() != 0:
        return "needs root (namespaces, mounts, sshd)"
    if not Path("/usr/sbin/sshd").is_file():
        return "sshd is not installed (Debian: apt-get install openssh-server)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return (f"missing {', '.join(missing)} "
                "(Debian: openssh-server rsync slirp4netns nftables iproute2 python3.11-venv nodejs npm)")
    if not Path("/dev/net/tun").exists():
        return "no /dev/net/tun for slirp4netns"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--net", "--uts", "--kill-child",
         "bash", "-c", "ip link add b0 type bridge && ip link add v0 type veth peer name v1 && mount -t tmpfs t /mnt"],
        check=False, capture_output=True, text=True, timeout=30,
    )
    if probe.returncode:
        return f"cannot make namespaces, a bridge, veths or mounts here: {probe.stderr.strip()[:300]}"
    return None


def _with_home(passwd_line: str, home: str) -> str:
    f = passwd_line.split(":")
    f[5] = home
    return ":".join(f)


@dataclass
class Step:
    name: str
    rc: int | str
    seconds: float
    output: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class LoopbackCluster:
    """A sandbox with `hosts` cluster hosts (host 0 the head), their sshd up, and a command runner.

    with LoopbackCluster(tmp_path, 2) as c:
        c.sh("ray up -y cluster.yaml")    # in the sandbox: HOME is the client's, cwd the checkout
    """

    def __init__(self, work: Path, hosts: int = 2, ready_timeout: float = 60):
        self.work = Path(work)
        self.n = hosts
        self.ready_timeout = ready_timeout
        self.names = ["head"] + [f"worker{i}" for i in range(1, hosts)]
        self.addresses = [host_address(i) for i in range(hosts)]
        self.home = self.work / "client"  # the client's HOME, seen inside as INSIDE_WORK/client
        self.steps: list[Step] = []
        self._procs: list[subprocess.Popen] = []
        self.sandbox: subprocess.Popen | None = None
        self.decoy: subprocess.Popen | None = None
        self.cluster_names: list[str] = []

    # -- files -----------------------------------------------------------------------------
    def inside(self, path: Path) -> str:
        """A path under the work folder, as the sandbox sees it."""
        return f"{INSIDE_WORK}/{Path(path).relative_to(self.work)}"

    def _prepare(self) -> None:
        w = self.work
        for d in ("logs", "etc", "shared"):
            (w / d).mkdir(parents=True, exist_ok=True)
        os.chown(w / "shared", UID, GID)
        # The user exists only inside the sandbox, and there root's home is the client's HOME (ssh
        # expands the `~` in `-i ~/.ssh/id_ed25519` with the home of the passwd file, not $HOME).
        for name, line in (("passwd", f"agensh:x:{UID}:{GID}:agensh:/home/agensh:/bin/bash"),
                           ("group", f"agensh:x:{GID}:"), ("shadow", "agensh:*:20000:0:99999:7:::")):
            lines = Path(f"/etc/{name}").read_text().splitlines()
            if name == "passwd":
                lines = [_with_home(x, f"{INSIDE_WORK}/client") if x.startswith("root:") else x for x in lines]
            (w / "etc" / name).write_text("\n".join([*lines, line]) + "\n")
        os.chmod(w / "etc" / "shadow", 0o640)
        # The client: HOME with the ssh key the cluster file names (~/.ssh/id_ed25519).
        (self.home / ".ssh").mkdir(parents=True, mode=0o700)
        key = self.home / ".ssh" / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ray-up-test", "-f", str(key)], check=True)
        pub = key.with_suffix(".pub").read_text()
        for name in self.names:
            h = w / "hosts" / name
            (h / "sshd").mkdir(parents=True)
            host_key = h / "sshd" / "host_ed25519"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
            home = h / "home"
            shutil.copytree("/etc/skel", home) if Path("/etc/skel").is_dir() else home.mkdir()
            (home / ".ssh").mkdir(mode=0o700)
            (home / ".ssh" / "authorized_keys").write_text(pub)
            os.chmod(home / ".ssh" / "authorized_keys", 0o600)
            os.chmod(home, 0o755)
            for p in [home, *home.rglob("*")]:
                os.lchown(p, UID, GID)

    def cluster_file(self, source: Path, dest_name: str | None = None) -> Path:
        """A copy of a cluster file with this sandbox's hosts as head_ip / worker_ips and a cluster
        name of its own; everything else as the file says."""
        import yaml

        cfg = yaml.safe_load(Path(source).read_text())
        cfg["cluster_name"] = f"{cfg['cluster_name']}-test-{os.getpid()}"
        cfg["provider"]["head_ip"] = self.addresses[0]
        cfg["provider"]["worker_ips"] = self.addresses[1:]
        mounts = cfg.get("file_mounts") or {}
        if "~/agensh-secrets" in mounts:
            # The checkout's secrets/ as a clean copy: a developer's own secrets/agents.env stays here.
            secrets = self.work / "secrets"
            secrets.mkdir(exist_ok=True)
            for f in (Path(source).parent / mounts["~/agensh-secrets"]).glob("*"):
                if f.is_file() and ".env" not in f.name:
                    shutil.copy(f, secrets / f.name)
            os.chown(secrets, UID, GID)
            mounts["~/agensh-secrets"] = self.inside(secrets)
        self.cluster_names.append(cfg["cluster_name"])
        path = self.work / (dest_name or Path(source).name)
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self) -> None:
        self._prepare()
        # The decoy: named like a Ray process, started outside; `ray stop` must never reach it.
        decoy = self.work / "decoy" / "raylet"
        decoy.parent.mkdir()
        shutil.copy("/bin/sleep", decoy)
        self.decoy = subprocess.Popen([str(decoy), "3600"])
        with open(self.work / "logs" / "sandbox.log", "w") as log:
            self.sandbox = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--mount", "--net", "--propagation",
                 "private", sys.executable, str(HERE / "sandbox.py"), "inside", str(self.work), str(ROOT), str(decoy),
                 *self.names],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1,
            )
        # The sandbox's PID 1 is unshare's child; slirp4netns joins its network namespace from outside.
        init = self._child_of(self.sandbox.pid)
        with open(self.work / "logs" / "slirp4netns.log", "w") as log:
            self._procs.append(subprocess.Popen(
                ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", str(init), "tap0"],
                stdout=log, stderr=subprocess.STDOUT,
            ))
        reply = self._reply(self.ready_timeout)
        if reply.get("ready") is not True:
            raise RuntimeError(f"the sandbox did not come up: {reply}\n{self.log('sandbox')}")
        self.facts = reply

    def _child_of(self, pid: int, timeout: float = 10) -> int:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except FileNotFoundError:
                children = []
            if children:
                return int(children[0])
            time.sleep(0.05)
        raise RuntimeError("unshare started no child")

    def _reply(self, timeout: float) -> dict:
        assert self.sandbox is not None and self.sandbox.stdout is not None
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.sandbox.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            return {"error": f"no answer from the sandbox in {timeout:.0f}s"}
        line = self.sandbox.stdout.readline()
        if not line:
            return {"error": f"the sandbox ended (exit {self.sandbox.poll()})"}
        return json.loads(line)

    def __exit__(self, *exc) -> None:
        # Everything by pid: the sandbox (its PID 1 takes every process inside with it), then slirp4netns.
        if self.sandbox is not None:
            try:
                if self.sandbox.poll() is None and self.sandbox.stdin:
                    self.sandbox.stdin.write(json.dumps({"exit": True}) + "\n")
                    self.sandbox.stdin.flush()
                    self.sandbox.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
            if self.sandbox.poll() is None:
                self.sandbox.kill()  # --kill-child: the sandbox's PID 1 gets SIGKILL, and with it everything inside
                self.sandbox.wait(timeout=30)
        for p in self._procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.decoy_survived = self.decoy is not None and self.decoy.poll() is None
        if self.decoy is not None and self.decoy.poll() is None:
            self.decoy.kill()
            self.decoy.wait()
        # The hosts' homes hold a venv and the agent CLIs each (about 1 GiB): only the logs, the
        # shared folder and what was fetched stay for a look afterwards.
        for home in self.work.glob("hosts/*/home"):
            shutil.rmtree(home, ignore_errors=True)
        # `ray` keeps its ssh control sockets under /tmp/ray_ssh_<user>/<cluster>: remove this cluster's.
        user_dir = Path(f"/tmp/ray_ssh_{hashlib.sha256(b'root').hexdigest()[:10]}")
        for name in self.cluster_names:
            shutil.rmtree(user_dir / hashlib.sha256(name.encode()).hexdigest()[:10], ignore_errors=True)
        try:
            user_dir.rmdir()  # only if no other cluster of root's uses it
        except OSError:
            pass

    # -- commands --------------------------------------------------------------------------
    def sh(self, command: str, name: str | None = None, timeout: float = 120) -> Step:
        """Run a bash command line in the sandbox as the user of docs/cluster.md would (HOME is the
        client's, cwd the checkout), with a time limit; its output goes to logs/<name>.log."""
        name = name or command.split()[0]
        slug = "".join(c if c.isalnum() else "-" for c in name).strip("-")
        log = self.work / "logs" / f"{len(self.steps):02d}-{slug}.log"
        assert self.sandbox is not None and self.sandbox.stdin is not None
        self.sandbox.stdin.write(json.dumps({"cmd": command, "timeout": timeout, "log": self.inside(log)}) + "\n")
        self.sandbox.stdin.flush()
        reply = self._reply(timeout + 30)
        step = Step(name, reply.get("rc", reply.get("error", "?")), reply.get("seconds", float("nan")),
                    log.read_text(errors="replace") if log.exists() else "")
        self.steps.append(step)
        return step

    def processes(self) -> list[dict]:
        """Every process in the sandbox (the hosts' included): pid, name, command line."""
        assert self.sandbox is not None and self.sandbox.stdin is not None
        self.sandbox.stdin.write(json.dumps({"ps": True}) + "\n")
        self.sandbox.stdin.flush()
        return self._reply(30).get("processes", [])

    def log(self, name: str) -> str:
        p = self.work / "logs" / f"{name}.log"
        return p.read_text(errors="replace")[-20_000:] if p.exists() else ""


# =============================================================================== inside the sandbox
def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _processes() -> list[dict]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                name = Path(f"/proc/{d}/comm").read_text().strip()
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            try:  # which host's process table it belongs to (each host has its own UTS namespace)
                host = subprocess.run(["nsenter", "-t", d, "-u", "hostname"], check=False, capture_output=True,
                                      text=True, timeout=5).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                host = ""
            out.append({"pid": int(d), "name": name, "cmdline": cmd, "host": host})
    return out


def inside(work: str, root: str, decoy: str, names: list[str]) -> None:
    """PID 1 of the sandbox: mounts, network, hosts; then runs the commands it is sent, one JSON
    line each on stdin, answering one JSON line each on stdout, until told to exit."""

    def say(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    t0 = time.time()
    # The sandbox must not see the machine's processes: `ray stop` kills whatever it can see.
    visible = _processes()
    if os.getpid() != 1 or any(decoy in p["cmdline"] for p in visible if p["pid"] != 1):
        say({"ready": False, "error": f"not isolated: pid {os.getpid()}, {len(visible)} processes visible"})
        return
    # Mounts (private to the sandbox): /run, the work folder at a fixed path, the user `agensh`.
    _run("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
    os.makedirs(INSIDE_WORK)
    _run("mount", "--bind", work, INSIDE_WORK)
    for f in ("passwd", "group", "shadow"):
        _run("mount", "--bind", f"{INSIDE_WORK}/etc/{f}", f"/etc/{f}")
    # Network: a bridge for the hosts, forwarding and NAT out through slirp4netns's tap0.
    _run("ip", "link", "set", "lo", "up")
    _run("ip", "link", "add", "br0", "type", "bridge")
    _run("ip", "addr", "add", f"{GATEWAY}/24", "dev", "br0")
    _run("ip", "link", "set", "br0", "up")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    nat = ("table ip nat {\n chain post {\n  type nat hook postrouting priority 100; policy accept;\n"
           f'  ip saddr {SUBNET}.0/24 oifname "tap0" masquerade\n }}\n}}\n')
    subprocess.run(["nft", "-f", "-"], input=nat, check=True, capture_output=True, text=True)
    hosts = []
    for i, name in enumerate(names):
        addr = host_address(i)
        _run("ip", "netns", "add", name)
        _run("ip", "link", "add", f"v{name}"[:15], "type", "veth", "peer", "name", "eth0", "netns", name)
        _run("ip", "link", "set", f"v{name}"[:15], "master", "br0", "up")
        _run("ip", "-n", name, "link", "set", "lo", "up")
        _run("ip", "-n", name, "addr", "add", f"{addr}/24", "dev", "eth0")
        _run("ip", "-n", name, "link", "set", "eth0", "up")
        _run("ip", "-n", name, "route", "add", "default", "via", GATEWAY)
        with open(f"{INSIDE_WORK}/logs/host-{name}.log", "w") as log:
            hosts.append(subprocess.Popen(
                ["ip", "netns", "exec", name, "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--mount",
                 "--uts", "--propagation", "private", "bash", str(HERE / "host.sh"), name, addr],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            ))
    # Ready when every sshd answers and slirp4netns has set up the way out.
    deadline = time.time() + 45
    pending = {host_address(i) for i in range(len(names))}
    tap = False
    while time.time() < deadline and (pending or not tap):
        for addr in list(pending):
            try:
                with socket.create_connection((addr, 22), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH"):
                        pending.discard(addr)
            except OSError:
                pass
        tap = tap or "default" in subprocess.run(["ip", "route", "show", "default"], check=False, capture_output=True,
                                                 text=True).stdout
        if pending or not tap:
            time.sleep(0.2)
    if pending or not tap:
        say({"ready": False, "error": f"sshd not answering on {sorted(pending)}" if pending else "no way out (tap0)"})
        return
    say({"ready": True, "seconds": round(time.time() - t0, 1), "processes_visible_at_start": len(visible)})

    env = {
        "HOME": f"{INSIDE_WORK}/client", "LANG": "C.UTF-8",
        # Ray's local-provider state and config caches, and any other temporary file, stay in the sandbox.
        "RAY_TMPDIR": f"{INSIDE_WORK}/client/tmp", "TMPDIR": f"{INSIDE_WORK}/client/tmp",
        "PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONUNBUFFERED": "1", "TERM": "dumb",
    }
    os.makedirs(env["RAY_TMPDIR"], exist_ok=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("exit"):
            break
        if req.get("ps"):
            say({"processes": _processes()})
            continue
        start = time.time()
        with open(req["log"], "w") as out:
            p = subprocess.Popen(["bash", "-c", req["cmd"]], cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc: int | str = p.wait(timeout=req["timeout"])
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                rc = "timeout"
        say({"rc": rc, "seconds": round(time.time() - start, 1)})


if __name__ == "__main__" and sys.argv[1:2] == ["inside"]:
    inside(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
