"""ProgramBench end to end, without Docker: the package's own fixture reproduced by our scoring path,
the catalogue's fast failure, the sandbox against a hostile submission, the execute-only reference
through an agent's paths, checkpoints into the trace, and a submission scored by the package's
leaderboard functions. Real subprocesses, real bubblewrap, real git, real ACP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from programbench.constants import TASKS_DIR as PB_TASKS
from programbench.eval.eval import EvaluationResult
from programbench.submission import aggregate, score_instance, score_run
from programbench.utils.load_data import load_all_instances

from agensh_ray import bubblewrap
from agensh_ray.agent.sandbox import SandboxPolicy, bwrap_argv
from agensh_ray.analysis.views import connect
from agensh_ray.config import SandboxConfig
from agensh_ray.confined import Confined
from agensh_ray.errors import SubmissionError
from agensh_ray.task import Task
from agensh_ray.task.checkpoint import Checkpoints
from agensh_ray.task.evaluate import submission_archive
from agensh_ray.task.reference import REFERENCE_UID, ExecuteOnlyError, install_reference, read_text
from agensh_ray.task.sandbox import BwrapBackend
from agensh_ray.trace import TraceWriter, write_schema_files
from tests.support import LocalServices, await_for, wait_for

CALCULATOR = PB_TASKS / "testorg__calculator.abc1234"
RUNS = PB_TASKS.parent / "test_runs"
CMATRIX = "programbench:abishekvashok__cmatrix.5c082c6"
# A bound against hangs, not a timing claim: on an idle machine these CLIs answer in about a second,
# on a shared one at nice 19 importing Ray alone can take a minute.
HANG_S = 240


def cli(module: str, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("name, score", [("correct", 0.5), ("incorrect", 0.0)])
def test_calculator_fixture_reproduces_the_official_eval_json(tmp_path, name, score):
    submission = RUNS / name / CALCULATOR.name / "submission.zip"
    official_path = RUNS / name / CALCULATOR.name / f"{CALCULATOR.name}.eval.json"
    out = tmp_path / "eval.json"
    ran = cli("agensh_ray.score", "--task", str(CALCULATOR), str(submission), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    printed = json.loads(ran.stdout.strip().splitlines()[-1])
    ours = EvaluationResult.model_validate_json(out.read_text())
    official = EvaluationResult.model_validate_json(official_path.read_text())
    assert [(t.branch, t.name, t.status) for t in ours] == [(t.branch, t.name, t.status) for t in official]
    assert ours.warnings == official.warnings
    assert ours.error_code is official.error_code is None
    instance = next(i for i in load_all_instances() if i["instance_id"] == CALCULATOR.name)
    assert score_instance(out, instance) == score_instance(official_path, instance) == printed["score"] == score
    assert (printed["passed"], printed["total"], printed["not_run"]) == (3 if score else 0, 6, 3)
    # the steps that ran are the Evaluator's, in its order, every one logged
    steps = [e["step"] for e in ours.log]
    assert steps[:4] == ["wipe_workspace", "clear_stale_executable", "seed_git", "compile"]
    assert steps[-3:] == ["patch_timeout_method", "run_tests", "results_read"]


def test_a_catalogue_instance_fails_fast_naming_what_is_missing(tmp_path):
    ran = cli("agensh_ray.run", "--task", CMATRIX, "--run-dir", str(tmp_path), timeout=HANG_S,
              env={"PROGRAMBENCH_BLOB_DIR": "", "PROGRAMBENCH_DOCKER_EXECUTABLE": "no-such-docker"})
    assert ran.returncode == 2, ran.stdout + ran.stderr
    err = ran.stderr
    assert f"{CMATRIX} cannot run on this machine" in err
    assert "a container engine: `no-such-docker` is not on PATH" in err
    assert "programbench/abishekvashok_1776_cmatrix.5c082c6:task_cleanroom_v6" in err
    assert "PROGRAMBENCH_BLOB_DIR is not set" in err
    assert not list(tmp_path.iterdir()), "nothing was started"
    # With a blob folder that lacks the instance, that is what it says.
    ran = cli("agensh_ray.tasks", "show", CMATRIX, timeout=HANG_S,
              env={"PROGRAMBENCH_BLOB_DIR": str(tmp_path), "PROGRAMBENCH_DOCKER_EXECUTABLE": "no-such-docker"})
    assert f"PROGRAMBENCH_BLOB_DIR={tmp_path} has no abishekvashok__cmatrix.5c082c6/tests/" in ran.stdout
    bad = cli("agensh_ray.run", "--task", "programbench:nope__nothing.123", timeout=HANG_S)
    assert bad.returncode == 2 and "unknown ProgramBench instance 'nope__nothing.123'" in bad.stderr


def test_tasks_cli_lists_both_sources():
    ran = cli("agensh_ray.tasks", "list")
    assert ran.returncode == 0
    lines = ran.stdout.splitlines()
    textkit = next(line for line in lines if line.startswith("textkit "))
    assert textkit.split()[1:] == ["local", "python", "easy", str(Task.load("textkit").active_tests())]
    assert any(line.startswith(f"{CMATRIX} ") and " c " in line for line in lines)
    assert sum(" programbench " in line for line in lines) == len(load_all_instances())
    only = cli("agensh_ray.tasks", "list", "--source", "local")
    assert "programbench:" not in only.stdout


def test_bad_submissions_are_refused_with_the_reason(tmp_path):
    (tmp_path / "nocompile").mkdir()
    (tmp_path / "nocompile" / "main.c").write_text("int main(){}")
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04 not really")
    (tmp_path / "notes.txt").write_text("hi")
    for path, why in [("nocompile", "no compile.sh at its top"), ("broken.zip", "not a readable zip"),
                      ("notes.txt", "a folder or a .tar.gz"), ("missing", "no such file or folder")]:
        with pytest.raises(SubmissionError, match=why):
            submission_archive(tmp_path / path, tmp_path)
        ran = cli("agensh_ray.score", "--task", "textkit", str(tmp_path / path), "--out", str(tmp_path / "e.json"))
        assert ran.returncode == 2 and why in ran.stderr
        assert not (tmp_path / "e.json").exists()


def test_the_sandbox_confines_a_hostile_submission(tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("the hidden tests")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "compile.sh").write_text(f"""#!/bin/bash
echo "net: $(python3 -c 'import socket; socket.create_connection(("1.1.1.1", 53), timeout=2)' 2>&1 | tail -1)"
echo "usr: $(touch /usr/pwned 2>&1)"
echo "shadow: [$(cat /etc/shadow 2>&1)]"
echo "host: $(cat {secret} 2>&1)"
echo "tmp: $(touch /tmp/outside && ls /tmp)"
echo "whoami: $(id -u) caps $(grep CapEff /proc/self/status)"
echo "procs: $(ls /proc | grep -c '^[0-9]')"
printf '#!/bin/sh\\nexit 0\\n' > executable && chmod +x executable
""")
    result = Task.load("textkit").evaluate(sub, scratch=tmp_path)
    log = next(e["output"] for e in result.log if e["step"] == "compile")
    assert "net: OSError: [Errno 101] Network is unreachable" in log
    assert "usr: touch: cannot touch '/usr/pwned': Read-only file system" in log
    assert "shadow: [cat: /etc/shadow: No such file or directory]" in log  # left out of the sandbox's /etc
    assert f"host: cat: {secret}: No such file or directory" in log
    assert "whoami: 0 caps CapEff:\t0000000000000000" in log
    assert not Path("/usr/pwned").exists() and not Path("/tmp/outside").exists()
    assert int(log.split("procs: ")[1].split()[0]) < 10, "only the sandbox's own processes"
    assert list(tmp_path.glob("agensh-score-*")) == [], "every scratch folder removed"


def test_a_sandbox_step_that_overruns_is_killed_and_reads_stay_inside(tmp_path):
    backend = BwrapBackend(tmp_path)
    try:
        env = backend.new_env("local/x")
        r = env.execute("sleep 60 & sleep 60", timeout=1)
        assert (r["returncode"], r["exception_info"]) == (-1, "Command timed out after 1s")
        assert "sleep 60" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        (tmp_path / "outside.txt").write_text("host file")
        env.execute(f"ln -s {tmp_path / 'outside.txt'} /workspace/results.xml && ln -s /etc/shadow /workspace/s")
        for link in ("/workspace/results.xml", "/workspace/s"):  # links resolve inside the sandbox
            with pytest.raises(FileNotFoundError):
                env.copy_out(link)
    finally:
        backend.close()
    assert not any(tmp_path.glob("agensh-score-*"))


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env).stdout


def test_checkpoints_write_eval_json_trace_rows_and_a_submission_the_leaderboard_scores(tmp_path):
    task = Task.load("textkit")
    origin = tmp_path / "origin"
    task.materialize_starter(origin)
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "starter")
    run_dir = tmp_path / "runs" / "r1"
    write_schema_files(run_dir)
    trace = TraceWriter(run_dir, "driver", "r1", flush_interval_s=0)
    ckpt = Checkpoints(task, run_dir, trace, time_scale=60)
    first = ckpt.run("periodic", str(origin))
    features = {f.name: f for f in task.features()}
    registry = origin / "textkit" / "registry.py"
    for name in ("upper", "lower", "rot13"):
        (origin / features[name].module).write_text(task.oracle_module(name))
        lines = registry.read_text().splitlines(keepends=True)
        lines.insert(lines.index("}\n"), features[name].registry_line + "\n")
        registry.write_text("".join(lines))
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "three features")
    final = ckpt.run("final", str(origin))
    trace.close()
    assert first.score == 0.0 < final.score < 1.0 and final.total == task.active_tests()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "01-periodic.eval.json", "02-final.eval.json", "submission.tar.gz"]

    con = connect(run_dir)
    rows = con.execute("SELECT checkpoint, passed, total, pass_rate, eval_json, schedule_s >= 0 FROM scores "
                       "ORDER BY ts").fetchall()
    assert rows == [("periodic", 0, final.total, 0.0, "checkpoints/01-periodic.eval.json", True),
                    ("final", final.passed, final.total, final.score, "checkpoints/02-final.eval.json", True)]
    # nothing on main changes the test runner: no strict evaluation ran (no strict eval.json above), strict = official
    assert con.execute("SELECT runner_files, strict_pass_rate, strict_passed, strict_eval_json FROM scores "
                       "ORDER BY ts").fetchall() == [("", 0.0, 0, None), ("", final.score, final.passed, None)]
    # "which tests flipped when" is SQL
    flipped = con.execute("""
        SELECT count(*) FROM test_results a JOIN test_results b USING (branch, test)
        WHERE a.checkpoint = 'periodic' AND b.checkpoint = 'final' AND a.status <> 'passed' AND b.status = 'passed'
          AND NOT b.ignored""").fetchone()[0]
    assert flipped == final.passed
    per_ckpt = con.execute("SELECT checkpoint, count(*), count(*) FILTER (WHERE NOT ignored) FROM test_results "
                           "GROUP BY 1 ORDER BY 1").fetchall()
    n_all = sum(len(b["tests"]) for b in task.instance["branches"].values())
    assert per_ckpt == [("final", n_all, final.total), ("periodic", n_all, final.total)]
    with tarfile.open(run_dir / "checkpoints" / "submission.tar.gz") as tar:
        assert "textkit/commands/rot13.py" in tar.getnames() and "compile.sh" in tar.getnames()

    # The run's submission, scored by the package's leaderboard functions.
    (run_dir / "config.json").write_text(json.dumps({"task": "textkit"}))
    (run_dir / "summary.json").write_text(json.dumps({"score": final.score}))
    out = tmp_path / "submission"
    ran = cli("agensh_ray.submit", str(run_dir), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    headline = json.loads(ran.stdout.strip().splitlines()[-1])
    assert sorted(p.name for p in (out / "textkit").iterdir()) == ["submission.tar.gz", "textkit.eval.json"]
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    (tasks_dir / "textkit").symlink_to(task.root)
    instances = {i["instance_id"]: i for i in load_all_instances(tasks_dir=tasks_dir)}
    scores = score_run(out, instances)
    assert scores == {"textkit": final.score} == headline["scores"]
    assert aggregate(scores, len(instances)).as_dict() == headline["local"]
    assert headline["local"]["mean_score"] == round(final.score, 4) and headline["programbench"] is None
    assert "unfinished" not in ran.stderr
    missing = cli("agensh_ray.submit", str(tmp_path / "runs"), "--out", str(tmp_path / "x"))
    assert missing.returncode == 2 and "is not a run folder" in missing.stderr


def _origin(tmp_path, compile_sh: str, message: str):
    """A one-commit repository on main holding only `compile.sh` (a checkpoint's forge, for these tests)."""
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "compile.sh").write_text(compile_sh)
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", message)
    return origin


def test_a_checkpoint_of_an_unchanged_main_repeats_the_last_result_and_none_starts_just_before_the_deadline(
        tmp_path):
    """Main unchanged since the last checkpoint: its result is repeated, not evaluated again, and still written
    (eval.json with a `reused` step, scores and test_results rows); the final one too, with its submission. A
    periodic checkpoint due within one checkpoint's duration of the deadline is not started."""
    origin = _origin(tmp_path, "#!/bin/sh\nprintf '#!/bin/sh\\nexit 0\\n' > executable\nchmod +x executable\n", "sub")
    run_dir = tmp_path / "run"
    write_schema_files(run_dir)
    trace = TraceWriter(run_dir, "driver", "r", flush_interval_s=0)
    ckpt = Checkpoints(Task.load(str(CALCULATOR)), run_dir, trace)
    first = ckpt.run("periodic", str(origin))
    assert len(ckpt.eval_s) == 1 and ckpt.reused == 0
    assert ckpt.periodic(str(origin), deadline_wall=time.time() + ckpt.eval_s[0] / 2) == "final_soon"
    assert not ckpt.busy and ckpt.skipped_near_deadline == 1
    assert ckpt.periodic(str(origin), deadline_wall=time.time() + 10 * ckpt.eval_s[0] + 3600) == "started"
    ckpt.wait()
    final = ckpt.run("final", str(origin))
    trace.close()
    assert len(ckpt.eval_s) == 1 and ckpt.reused == 2, "evaluated once"
    assert (final.passed, final.total, final.score) == (first.passed, first.total, first.score)
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["01-periodic.eval.json", "02-periodic.eval.json", "03-final.eval.json", "submission.tar.gz"]
    one, three = (EvaluationResult.model_validate_json((run_dir / "checkpoints" / n).read_text())
                  for n in ("01-periodic.eval.json", "03-final.eval.json"))
    assert three.log[-1]["step"] == "reused" and "01-periodic.eval.json" in three.log[-1]["output"]
    assert three.test_results == one.test_results and three.log[:-1] == one.log
    con = connect(run_dir)
    rows = con.execute("SELECT checkpoint, count(DISTINCT commit), count(*) FROM scores GROUP BY 1 ORDER BY 1")
    rows = rows.fetchall()
    assert rows == [("final", 1, 1), ("periodic", 1, 2)]
    per = con.execute("SELECT event_id, count(*) FROM test_results GROUP BY 1 ORDER BY 1").fetchall()
    assert [n for _, n in per] == [len(one.test_results)] * 3
    # a new commit is evaluated again
    (origin / "notes.txt").write_text("x")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "more")
    ckpt.trace = TraceWriter(run_dir, "driver2", "r", flush_interval_s=0)
    ckpt.run("periodic", str(origin))
    ckpt.trace.close()
    assert len(ckpt.eval_s) == 2 and ckpt.reused == 2


def test_the_final_checkpoint_cancels_a_background_one_still_scoring_an_older_main(tmp_path):
    """A periodic checkpoint whose build would never end, on a commit main has moved past: the final one kills
    its sandboxes instead of waiting, nothing of it is written, and main's new commit is scored."""
    origin = _origin(tmp_path, "#!/bin/sh\nsleep 3600\n", "slow")
    old = _git(origin, "rev-parse", "HEAD").strip()
    run_dir = tmp_path / "run"
    write_schema_files(run_dir)
    trace = TraceWriter(run_dir, "driver", "r", flush_interval_s=0)
    ckpt = Checkpoints(Task.load(str(CALCULATOR)), run_dir, trace)
    assert ckpt.start("periodic", str(origin))

    def sleeping():  # the periodic one's build is running in its sandbox
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        return ckpt._running_commit == old and "sleep 3600" in ps

    wait_for(sleeping, 120, "the periodic checkpoint's build to run")
    (origin / "compile.sh").write_text("#!/bin/sh\nprintf '#!/bin/sh\\nexit 0\\n' > executable\nchmod +x executable\n")
    _git(origin, "commit", "-q", "-am", "fast")
    final = ckpt.final(str(origin))
    trace.close()
    assert ckpt.cancelled == 1 and not ckpt.busy
    assert "sleep 3600" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["01-final.eval.json", "submission.tar.gz"]
    rows = connect(run_dir).execute("SELECT checkpoint, commit FROM scores").fetchall()
    assert rows == [("final", _git(origin, "rev-parse", "HEAD").strip())]
    assert final.error_code is None and final.total == 6


def test_background_checkpoints_yield_the_cpu_to_the_workers(tmp_path):
    """A periodic checkpoint scores at nice 10 or more (its sandboxes inherit it from its thread); the
    final one, and the caller's thread, keep the caller's priority."""
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "compile.sh").write_text('#!/bin/sh\necho "niceness $(nice)"\n'
                                       "printf '#!/bin/sh\\nexit 0\\n' > executable\nchmod +x executable\n")
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "sub")
    run_dir = tmp_path / "run"
    trace = TraceWriter(run_dir, "driver", "r", flush_interval_s=0)
    ckpt = Checkpoints(Task.load(str(CALCULATOR)), run_dir, trace, background_nice=10)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert ckpt.start("periodic", str(origin))
    assert not ckpt.start("periodic", str(origin)), "one at a time"
    ckpt.wait()
    # main moves on, so the final one is evaluated, not a repeat of the periodic result
    (origin / "README").write_text("moved on\n")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "later")
    ckpt.run("final", str(origin))
    trace.close()

    def niceness(name: str) -> int:
        result = EvaluationResult.model_validate_json((run_dir / "checkpoints" / name).read_text())
        return int(next(e["output"] for e in result.log if e["step"] == "compile").split("niceness ")[1].split()[0])

    assert niceness("01-periodic.eval.json") == max(10, own)
    assert niceness("02-final.eval.json") == own == os.getpriority(os.PRIO_PROCESS, 0)


LEAKS = [  # (attack, command): each would leave the reference's bytes in a leak-* file if it worked
    ("chmod then cat", "chmod u+r reference/textkit; cat reference/textkit > leak-chmod"),
    ("chmod by python",
     "python3 -c \"import os; os.chmod('reference/textkit', 0o755)\" && cp reference/textkit leak-os"),
    ("cat", "cat reference/textkit > leak-cat"),
    ("python open", "python3 -c \"open('leak-py','wb').write(open('reference/textkit','rb').read())\""),
    ("cp", "cp reference/textkit leak-cp"),
    ("dd", "dd if=reference/textkit of=leak-dd"),
    ("a user namespace", "unshare -U cat reference/textkit > leak-userns"),
    ("a user namespace as root", "unshare -U -r cat reference/textkit > leak-userns-root"),
    ("a hard link", "ln reference/textkit leak-link"),
    ("moving it", "mv reference/textkit leak-mv"),
    ("moving its folder", "mv reference leak-dir"),
]


def _no_leak(repo: Path) -> None:
    leaked = {p.name: p.stat().st_size for p in repo.rglob("leak-*") if p.is_file() and p.stat().st_size}
    assert not leaked, leaked
    ref = repo / "reference" / "textkit"
    assert ref.stat().st_mode & 0o777 == 0o111 and not (repo / "leak-dir").exists()


@pytest.mark.security
async def test_the_reference_is_execute_only_through_an_agents_paths(tmp_path):
    """Through a real worker host, its sandbox and a real ACP agent process: the clone has the reference,
    untracked; the ACP fs path refuses to read or overwrite it (and follows no link to it); shell commands, through
    the client's terminal (enter.py) or run by the agent itself inside its sandbox, cannot read, copy, chmod,
    link or move it, in a user namespace of their own neither; running it works both ways."""
    if bubblewrap.find().path is None:
        pytest.skip(f"no bubblewrap: {bubblewrap.find().why}")
    services = LocalServices(tmp_path, ["w001"])
    scripts = tmp_path / "scripts"  # the agent runs sandboxed: it sees its script through a read-only mount
    scripts.mkdir()
    script = scripts / "script.json"
    steps = [
        {"do": "read", "text": "reference/textkit"},
        {"do": "write", "text": "reference/textkit", "content": "#!/bin/sh\necho fake\n"},
        {"do": "terminal", "text": "printf 'hi\\n' | reference/textkit upper"},
        {"do": "terminal", "text": "git status --porcelain --ignored=no"},
        {"do": "read", "text": "README.md"},
        {"do": "terminal", "text": "ln -s reference/textkit alias"},
        {"do": "read", "text": "alias"},
        {"do": "shell", "text": "printf 'hi\\n' | reference/textkit upper"},
    ]
    # the terminal refuses dd and unshare by name (its allow-list); the agent's own shell has only the sandbox
    steps += [{"do": "terminal", "text": cmd} for what, cmd in LEAKS if not cmd.startswith(("dd", "unshare"))]
    steps += [{"do": "shell", "text": cmd} for what, cmd in LEAKS]
    script.write_text(json.dumps({"turns": [steps]}))
    host = services.host(tmp_path / "run", ["w001"], sandbox=SandboxConfig(read_only=[scripts]),
                         harness=f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --script {script} --log ~/agent.jsonl")
    log = host.workers["w001"].home / "agent.jsonl"
    await host.start()
    try:
        await host.launch("w001")
        await await_for(lambda: log.exists() and log.read_text().count('"event": "step"') >= len(steps), 120,
                        f"{len(steps)} steps")
    finally:
        await host.stop()
        services.close()
    done = [json.loads(line) for line in log.read_text().splitlines() if '"event": "step"' in line]
    read, write, run, status, readme, link, read_link, run_own = done[:8]
    assert not read["ok"] and "execute-only" in read["result"]
    assert not write["ok"] and "execute-only" in write["result"]
    assert run["ok"] and run["result"]["output"] == "HI\n" and run["result"]["exit_code"] == 0
    assert status["result"]["output"] == "", "the reference is not part of the repository"
    assert readme["ok"] and "textkit" in readme["result"]
    assert link["ok"] and not read_link["ok"] and "symbolic link on the way" in read_link["result"], "never followed"
    assert run_own["ok"] and run_own["result"]["output"] == "HI\n"
    for step, attack in zip(done[8:], [s["text"] for s in steps[8:]]):
        assert step["ok"] and step["result"]["exit_code"] != 0, (attack, step["result"])
    repo = tmp_path / "run" / "workers" / "w001" / "repo"
    _no_leak(repo)
    if os.geteuid() == 0:  # the agent runs as uid 0: the copy is not its own
        assert (repo / "reference" / "textkit").stat().st_uid == REFERENCE_UID


@pytest.mark.security
def test_the_host_reads_a_file_for_an_agent_checking_the_file_it_opened(tmp_path):
    """fs/read_text_file's read (the host may run as root): the check is on the opened file, so a path swapped
    for a link to the reference after the first check, a FIFO or the reference itself yield nothing."""
    ref = install_reference(Path(os.path.realpath("/usr/bin/tr")), tmp_path, "reference/tr")
    (tmp_path / "notes.txt").write_text("notes")
    (tmp_path / "swapped").symlink_to(ref)
    os.mkfifo(tmp_path / "fifo")
    root = Confined(tmp_path)
    assert read_text(root, "notes.txt") == "notes"
    if os.geteuid() == 0:  # opening it works for root: the check on the open file refuses
        with pytest.raises(ExecuteOnlyError):
            read_text(root, ref)
    else:
        with pytest.raises(PermissionError):
            read_text(root, ref)
    with pytest.raises(OSError):  # a last symlink is not followed (ELOOP)
        read_text(root, "swapped")
    with pytest.raises(PermissionError, match="not a regular file"):  # and it does not block
        read_text(root, "fifo")


@pytest.mark.security
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_the_worker_sandbox_runs_the_reference_but_never_hands_out_its_bytes(user):
    """The agent sandbox's own command line (bwrap_argv), as a host running as root runs it (the agent is uid 0
    without capabilities, the copy is nobody's) and as a host running as another user does (the agent owns the
    reference, a hard link of the run's: what holds is the read-only bind and no nested user namespace): the
    execute-only ELF runs, no attack gets its bytes, /proc/<pid>/mem of the running reference is closed."""
    if bubblewrap.find().path is None:
        pytest.skip(f"no bubblewrap: {bubblewrap.find().why}")
    if os.geteuid() != 0:
        pytest.skip("runs the sandbox as root and as nobody: needs root")
    work = Path(tempfile.mkdtemp(prefix="agensh-ref-"))  # pytest's own folder is root's alone
    try:
        repo = work / "repo"
        repo.mkdir()
        # a system ELF stands in for the reference: textkit's embeds the Python in root's HOME, which nobody cannot
        # reach (the run's agents get it through the sandbox's toolchain; the test above runs it)
        install_reference(Path(os.path.realpath("/usr/bin/tr")), repo, "reference/textkit")
        as_user: list[str] = []
        if user != "root":
            subprocess.run(["chown", "-R", "65534:65534", str(work)], check=True)
            as_user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--"]
        links = tuple((link, os.readlink(link)) for link in ("/bin", "/lib", "/lib64", "/sbin") if os.path.islink(link))
        policy = SandboxPolicy.build(argv=[], env={}, writable=[work], chdir=repo,
                                     endpoints={}, execute_only=[repo / "reference"])
        policy = policy.model_copy(update={"read_only": (Path("/usr"), Path("/etc")), "symlinks": links})

        def sh(cmd: str) -> subprocess.CompletedProcess:
            argv = bwrap_argv(policy, ["sh", "-c", cmd], None, as_root=not as_user)
            return subprocess.run([*as_user, *argv], capture_output=True, text=True, input="hello\n", timeout=120,
                                  env={"PATH": "/usr/bin:/bin"})

        assert sh("id -u").stdout.strip() == ("0" if user == "root" else "65534")
        assert sh("reference/textkit a-z A-Z").stdout == "HELLO\n"
        for attack, cmd in LEAKS:
            res = sh(cmd)
            assert res.returncode != 0, (attack, res.stdout, res.stderr)
        _no_leak(repo)
        # an unreadable binary runs non-dumpable: /proc/<pid>/mem of the running reference is closed too
        res = sh("reference/textkit a b </dev/zero >/dev/null & p=$!; sleep 0.2; head -c 16 /proc/$p/mem; kill $p")
        assert "Permission denied" in res.stderr
    finally:
        shutil.rmtree(work)


@pytest.fixture(scope="module")
def figlet_task(tmp_path_factory) -> Task:
    if shutil.which("figlet") is None:
        pytest.skip("the Debian package figlet is not installed (apt-get install figlet; .ci/run does)")
    sys.path.insert(0, str(Path(__file__).parents[1] / "tasks" / "debian"))
    try:
        import figlet as make_figlet
    finally:
        sys.path.pop(0)
    out = make_figlet.build(tmp_path_factory.mktemp("tasks") / "debian__figlet.test")
    return Task.load(str(out))


def test_the_figlet_task_is_generated_the_programbench_way(figlet_task: Task):
    branches = figlet_task.instance["branches"]
    assert sum(len(b["tests"]) for b in branches.values()) >= 100 and len(branches) >= 3
    assert [name for name, b in branches.items() if b["ignored"]] == ["info"]
    assert all(r["id"] == "dummy_pass" for b in branches.values() for t in b["ignored_tests"] for r in t["reasons"])
    assert any(b["ignored_tests"] for b in branches.values())
    assert (figlet_task.root / "executable").stat().st_mode & 0o777 == 0o111
    assert figlet_task.instance["eval_clean_hashes"] == [figlet_task._reference_hash]


def _submission(tmp_path: Path, name: str, files: dict[str, bytes | str]) -> Path:
    sub = tmp_path / name
    sub.mkdir()
    for rel, data in files.items():
        (sub / rel).write_bytes(data if isinstance(data, bytes) else data.encode())
    return sub


def test_the_figlet_reference_scores_one_a_dummy_nothing(figlet_task: Task, tmp_path: Path):
    import gzip

    binary = os.path.realpath(shutil.which("figlet"))
    gold = _submission(tmp_path, "gold", {  # the reference's own bytes, produced by the build
        "figlet.gz": gzip.compress(Path(binary).read_bytes()),
        "compile.sh": "#!/bin/sh\nset -e\ngunzip -c figlet.gz > executable\nchmod +x executable\n"})
    smuggled = _submission(tmp_path, "smuggled", {  # a shipped copy is removed by its gold hash
        "figlet": Path(binary).read_bytes(), "compile.sh": "#!/bin/sh\ncp figlet executable; chmod +x executable\n"})
    dummy = _submission(tmp_path, "dummy", {"compile.sh": "#!/bin/sh\nprintf '#!/bin/sh\\nexit 0\\n' > executable\n"
                                                          "chmod +x executable\n"})
    delegate = _submission(tmp_path, "delegate", {  # the installed program is masked in the sandbox
        "compile.sh": "#!/bin/sh\nprintf '#!/bin/sh\\nexec /usr/bin/figlet \"$@\"\\n' > executable\nchmod +x executable\n"})
    scores = {s.name: figlet_task.summarize(figlet_task.evaluate(s)) for s in (gold, smuggled, dummy, delegate)}
    assert scores["gold"].score == 1.0 and scores["gold"].total >= 100
    assert scores["dummy"].score < 0.05
    assert scores["smuggled"].score == 0.0 and scores["smuggled"].error_code == "compile_failed"
    assert scores["delegate"].score < 0.05
