"""cluster.yaml and cluster-local.yaml: Ray's own validation, and every command in them parsed by
bash exactly as Ray will hand it over ssh. tests/test_cluster_ray_up.py runs `ray up` for real."""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.command_runner import SSHCommandRunner
from ray.autoscaler._private.commands import _bootstrap_config
from ray.autoscaler._private.util import prepare_config, validate_config, with_envs, with_head_node_ip

from agensh_ray.task.reference import ignore_references

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_FILES = ("cluster.yaml", "cluster-local.yaml")
PINS = ROOT / ".ci" / "agent-clis.txt"
HEAD_IP = "10.0.0.10"


def load(name):
    return yaml.safe_load((ROOT / name).read_text())


def pins() -> list[str]:
    return [line.strip() for line in PINS.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_aws_cluster_has_1024_slots_and_validates():
    raw = load("cluster.yaml")
    config = prepare_config(copy.deepcopy(raw))
    validate_config(config)
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    workers = [t for name, t in types.items() if name != config["head_node_type"]]
    nodes = 1 + sum(t["min_workers"] for t in workers)
    assert nodes == 16
    assert head["resources"]["agent_slot"] == 64 and all(t["resources"]["agent_slot"] == 64 for t in workers)
    assert nodes * 64 == 1024
    for cmd in (*config["head_start_ray_commands"], *config["worker_start_ray_commands"]):
        if "ray start" in cmd:
            assert "RAY_AUTH_MODE=token" in cmd and "agent_slot" in cmd


def test_local_cluster_validates_and_bootstraps_all_15_workers():
    raw = load("cluster-local.yaml")
    config = prepare_config(copy.deepcopy(raw))
    validate_config(config)
    boot = _bootstrap_config(copy.deepcopy(raw), no_config_cache=True)
    assert len(boot["provider"]["worker_ips"]) == 15
    assert boot["provider"]["head_ip"] == HEAD_IP
    node_type = boot["available_node_types"][boot["head_node_type"]]
    assert node_type["min_workers"] == node_type["max_workers"] == 15
    # Ray's v2 autoscaler counts the head in the local provider's one node type and starts 14 of
    # the 15 worker hosts: every `ray start` runs the v1 autoscaler, which starts them all.
    for cmd in boot["head_start_ray_commands"] + boot["worker_start_ray_commands"]:
        if "ray start" in cmd:
            assert "RAY_enable_autoscaler_v2=0" in cmd and "RAY_AUTH_MODE=token" in cmd and "agent_slot" in cmd


class _Provider:
    """Just enough of a node provider for Ray's SSHCommandRunner to address a node."""

    def __init__(self, ip: str):
        self.ip = ip

    def internal_ip(self, node_id):
        return self.ip

    def external_ip(self, node_id):
        return self.ip

    def is_terminated(self, node_id):
        return False


def remote_commands(name: str) -> list[tuple[str, str]]:
    """(what, remote command line) for every command Ray runs from the cluster file, built by Ray's
    own code: the config as `ray up` prepares it, each node's commands with the variables Ray adds
    (the v2 autoscaler's exports, RAY_HEAD_IP on workers), through SSHCommandRunner.run with Ray's
    login-shell wrapper. The remote command line is what sshd hands to the user's shell."""
    raw = load(name)
    config = prepare_config(copy.deepcopy(raw))
    auth = config["auth"]
    captured: list[list[str]] = []

    class Recorder(SSHCommandRunner):
        def _run_helper(self, final_cmd, with_output=False, exit_on_fail=False, silent=False):
            captured.append(final_cmd)

    out: list[tuple[str, str]] = []

    def run_on(node_ip: str, what: str, commands: list[str], env: dict | None = None, run_env: str = "auto"):
        runner = Recorder(
            log_prefix="", node_id=node_ip, provider=_Provider(node_ip), auth_config=auth,
            cluster_name=config["cluster_name"], process_runner=subprocess, use_internal_ip=True,
        )
        runner.ssh_control_path = None  # nothing to create: no ssh runs
        for i, cmd in enumerate(commands):
            captured.clear()
            runner.run(cmd, environment_variables=env, run_env=run_env)
            (final,) = captured
            target = final.index(f"{auth['ssh_user']}@{node_ip}")
            out.append((f"{name} {what}[{i}]", " ".join(final[target + 1 :])))

    head_type = config["head_node_type"]
    v2_env = {"RAY_enable_autoscaler_v2": "1", "RAY_CLOUD_INSTANCE_ID": "head", "RAY_NODE_TYPE_NAME": head_type}
    run_on(HEAD_IP, "initialization_commands", config["initialization_commands"], run_env="host")
    run_on(HEAD_IP, "head_setup_commands", config["head_setup_commands"])
    run_on(HEAD_IP, "head_start_ray_commands", with_envs(config["head_start_ray_commands"], v2_env),
           env={"RAY_USAGE_STATS_ENABLED": 0})
    worker_ip = "10.0.0.11"
    run_on(worker_ip, "worker initialization_commands",
           with_head_node_ip(config["initialization_commands"], HEAD_IP), run_env="host")
    run_on(worker_ip, "worker_setup_commands", with_head_node_ip(config["worker_setup_commands"], HEAD_IP))
    run_on(worker_ip, "worker_start_ray_commands", with_head_node_ip(config["worker_start_ray_commands"], HEAD_IP))
    return out


def bash_syntax_errors(command_line: str) -> str | None:
    """bash's complaint about a command line it would run, or None. The remote command line is
    `bash --login -c -i '<payload>'`: both the line and the payload must parse."""
    errors = []
    outer = subprocess.run(["bash", "-n", "-c", command_line], check=False, capture_output=True, text=True)
    if outer.returncode:
        errors.append(outer.stderr.strip())
    else:
        argv = shlex.split(command_line)
        assert argv[:4] == ["bash", "--login", "-c", "-i"], argv
        inner = subprocess.run(["bash", "-n", "-c", argv[4]], check=False, capture_output=True, text=True)
        if inner.returncode:
            errors.append(inner.stderr.strip())
    return "\n".join(errors) or None


@pytest.mark.parametrize("name", CLUSTER_FILES)
def test_every_command_parses_in_bash_as_ray_runs_it(name):
    commands = remote_commands(name)
    assert len(commands) >= 10
    bad = []
    for what, line in commands:
        err = bash_syntax_errors(line)
        if err:
            bad.append(f"{what}: {err}\n    {line}")
    assert not bad, "commands bash cannot parse (a ` #` in a plain YAML string cuts the command):\n" + "\n".join(bad)


def test_a_cut_command_is_caught():
    """The class of bug: YAML reads a plain scalar only up to ` #`, leaving an unclosed quote."""
    cut = yaml.safe_load("- grep -q 'x' ~/.bashrc || echo 'export A=1  # x' >> ~/.bashrc")[0]
    assert cut == "grep -q 'x' ~/.bashrc || echo 'export A=1"
    line = " ".join(["bash", "--login", "-c", "-i", shlex.quote(f"source ~/.bashrc; ({cut})")])
    assert "unexpected EOF" in (bash_syntax_errors(line) or "")


def test_both_files_set_up_nodes_the_same_way():
    """cluster-local.yaml's setup runs for real in tests/test_cluster_ray_up.py; cluster.yaml's must be the same."""
    assert load("cluster.yaml")["setup_commands"] == load("cluster-local.yaml")["setup_commands"]
    for name in CLUSTER_FILES:
        cfg = load(name)
        assert cfg["file_mounts"]["~/agensh-ray"] == "."
        assert cfg["rsync_filter"] == [".gitignore"] and cfg["rsync_exclude"] == ["/.git"]


def test_agent_cli_pins_are_in_one_file_that_ci_and_the_clusters_read():
    assert len(pins()) == 4 and all(re.fullmatch(r"@?[\w.-]+(/[\w.-]+)?@\d+\.\d+\.\d+", p) for p in pins())
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".ci/agent-clis.txt" in ci
    for name in CLUSTER_FILES:
        setup = " ".join(load(name)["setup_commands"])
        assert "~/agensh-ray/.ci/agent-clis.txt" in setup
    for p in pins():
        package = p.rsplit("@", 1)[0]
        assert package not in ci and package not in " ".join(load("cluster.yaml")["setup_commands"]), \
            f"{package} is pinned in .ci/agent-clis.txt; name it nowhere else"
        # The docs and the real-agent tests name the same versions.
        assert p in (ROOT / "docs" / "real-agents.md").read_text(), f"docs/real-agents.md does not say {p}"
        assert f'"{p}"' in (ROOT / "tests" / "test_real_agents.py").read_text(), f"tests/test_real_agents.py lacks {p}"


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync is not installed")
@pytest.mark.parametrize("name", CLUSTER_FILES)
def test_rsync_leaves_the_ignored_files_behind_and_fetches_whole_runs(name, tmp_path):
    """Ray's own rsync arguments for the file's rsync_exclude / rsync_filter, run with local rsync."""
    cfg = load(name)
    args = SSHCommandRunner._create_rsync_filter_args(
        None, {"rsync_exclude": cfg.get("rsync_exclude"), "rsync_filter": cfg.get("rsync_filter")}
    )
    checkout = tmp_path / "checkout"
    for rel in ("agensh_ray/x.py", ".venv/bin/python", ".git/HEAD", "runs/r1/trace/board/a.parquet",
                ".ci/node/bin/copilot", ".ci/run", "tasks/t/node_modules/m.js", "tasks/t/spec.md",
                "secrets/README.md", "secrets/agents.env"):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("x")
    (checkout / ".gitignore").write_text((ROOT / ".gitignore").read_text())

    def rsync(src: str, dst: Path) -> set[str]:
        dst.parent.mkdir(parents=True, exist_ok=True)  # Ray makes the target's parent first, too
        subprocess.run(["rsync", "-a", *args, src, str(dst)], check=True, capture_output=True)
        return {str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file()}

    # Up: the file_mounts entry "~/agensh-ray": "." (Ray copies a folder's contents: a trailing slash).
    up = rsync(f"{checkout}/", tmp_path / "node" / "agensh-ray")
    assert {"agensh_ray/x.py", ".ci/run", "tasks/t/spec.md", ".gitignore"} <= up
    assert not {p for p in up if p.startswith((".venv", ".git/", "runs", ".ci/node")) or "node_modules" in p}
    # The credentials never travel with the code; the entry "~/agensh-secrets": "./secrets" carries them.
    assert "secrets/README.md" in up and "secrets/agents.env" not in up
    assert cfg["file_mounts"]["~/agensh-secrets"] == "./secrets"
    assert rsync(f"{checkout}/secrets/", tmp_path / "node" / "agensh-secrets") == {"README.md", "agents.env"}

    # Down: a run folder, as docs/cluster.md says (trailing slashes), from shared storage or the checkout.
    runs = tmp_path / "node" / "shared" / "runs"
    for rel in ("r1/summary.json", "r1/trace/board/a.parquet", "r1/workers/w001/repo/.git/HEAD",
                "r1/workers/w001/repo/.gitignore", "r1/forge/repo.git/HEAD", "r1/reference/prog",
                "r1/workers/w001/repo/reference/prog", "r1/workers/w001/repo/src/reference/notes.md"):
        (runs / rel).parent.mkdir(parents=True, exist_ok=True)
        (runs / rel).write_text("x")
    ignore_references(runs / "r1")  # as the driver does: the execute-only copies cannot be read, by rsync either
    down = rsync(f"{runs}/r1/", tmp_path / "here" / "runs" / "r1")
    assert {"summary.json", "trace/board/a.parquet", "workers/w001/repo/.git/HEAD", "forge/repo.git/HEAD",
            "workers/w001/repo/src/reference/notes.md"} <= down
    assert not {p for p in down if p.endswith("reference/prog")}
    # The run folder inside the checkout, the default --run-dir on the head, comes down too.
    assert "r1/trace/board/a.parquet" in rsync(f"{checkout}/runs/", tmp_path / "here2")
    assert "runs/r1/trace/board/a.parquet" in rsync(f"{checkout}/runs", tmp_path / "here3")  # no slash: runs/ inside
