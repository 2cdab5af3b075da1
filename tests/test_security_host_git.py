"""No code from a worker's clone runs on the host (issue 27). A worker's agent owns its clone's `.git` and its
HOME: every way git has of running a program that a repository's configuration, its attributes or the user's
configuration can name is armed there (`arm`), each program leaving a marker file on the host when it runs.
Then every host code path that touches a clone runs on it: the baseline's `fingerprint`, a restarted host's
`Workdirs.recover` (with a merge in progress and uncommitted changes, so that every git call happens) and
`Workdirs.prepare` (a kept clone's remote set again; a clone made anew under an armed HOME), a whole WorkerHost
whose hostile agent arms its clone from inside its sandbox (its turn's fingerprint, then a host restart: recover,
prepare, the hand-off), and a checkpoint of a pushed tree whose `.gitattributes` names drivers. No marker appears.
Also: `fingerprint` is bounded (a link to /dev/zero, a FIFO, a huge file) and still sees work; `recover` still
aborts and stashes; the seed mirror a host leaves behind holds no forge token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agensh_ray.agent import sandbox
from agensh_ray.fakes.acp_agent import AgentScript, Step
from agensh_ray.worker import workdir as workdir_module
from agensh_ray.worker.keep_going import fingerprint
from agensh_ray.worker.workdir import Workdirs, git_env

pytestmark = [
    pytest.mark.security,
    pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"),
]

HOOKS = ("applypatch-msg", "commit-msg", "fsmonitor-watchman", "post-applypatch", "post-checkout", "post-commit",
         "post-index-change", "post-merge", "post-rewrite", "pre-applypatch", "pre-auto-gc", "pre-commit",
         "pre-merge-commit", "pre-push", "pre-rebase", "prepare-commit-msg", "push-to-checkout",
         "reference-transaction", "sendemail-validate", "post-receive", "update", "pre-receive")
PROGRAMS = ("fsmonitor", "textconv", "diffcmd", "clean", "smudge", "process", "external", "sshcommand", "editor",
            "pager", "askpass", "credential", "gpg", "mergedriver", "alias", "uploadpack", "included",
            "home-fsmonitor", "home-textconv", "home-clean", "home-smudge", "home-hook")


def arm_script(marks: Path) -> str:
    """A shell script that arms the clone it runs in (and its user's HOME): every program git could be told to
    run, each appending `id` to `marks/<its name>`; a config naming each; attributes naming the drivers. It uses
    no git (which would run them): what an agent would write with `cat`."""
    prog = (f'#!/bin/sh\necho "$(id) $0 $*" >> {marks}/$(basename "$0")\n'
            'if [ $# -eq 0 ]; then exec cat; fi\ncase "$1" in /*|*/*) exec cat "$1";; esac\nexit 0\n')
    hook = f'#!/bin/sh\necho "$(id) $0 $*" >> {marks}/hook-$(basename "$0")\ncat >/dev/null\nexit 0\n'
    lines = ["set -e", 'G="$(pwd)/.git"', 'E="$G/evil"', 'mkdir -p "$E" "$G/evil-hooks" "$G/hooks" "$G/info"',
             'mkdir -p "$HOME/.config/git" "$HOME/evil-hooks"',
             f"cat > \"$E/prog\" <<'EOF'\n{prog}EOF", f"cat > \"$E/hook\" <<'EOF'\n{hook}EOF",
             'chmod +x "$E/prog" "$E/hook"']
    for name in PROGRAMS:
        lines.append(f'cp "$E/prog" "$E/{name}"')
    for name in HOOKS:
        lines.append(f'cp "$E/hook" "$G/evil-hooks/{name}"; cp "$E/hook" "$G/hooks/{name}"; '
                     f'cp "$E/hook" "$HOME/evil-hooks/{name}"')
    config = textwrap.dedent("""\
        [include]
        \tpath = $E/included.cfg
        [core]
        \tfsmonitor = $E/fsmonitor
        \thooksPath = $G/evil-hooks
        \tsshCommand = $E/sshcommand
        \teditor = $E/editor
        \tpager = $E/pager
        \taskPass = $E/askpass
        \tattributesFile = $E/attributes
        [diff]
        \texternal = $E/external
        [diff "evil"]
        \ttextconv = $E/textconv
        \tcommand = $E/diffcmd
        [filter "evil"]
        \tclean = $E/clean
        \tsmudge = $E/smudge
        [filter "evilp"]
        \tprocess = $E/process
        [merge "evil"]
        \tdriver = $E/mergedriver %O %A %B
        [credential]
        \thelper = !$E/credential
        [gpg]
        \tprogram = $E/gpg
        [commit]
        \tgpgSign = true
        [alias]
        \tst = !$E/alias
        \tstash-all = !$E/alias
        [remote "evil"]
        \turl = ssh://example.invalid/x
        \tuploadpack = $E/uploadpack
        [submodule]
        \trecurse = true
        [pager]
        \tstatus = $E/pager
        \tdiff = $E/pager
        """)
    included = '[filter "inc"]\n\tclean = $E/included\n\tsmudge = $E/included\n'
    home = textwrap.dedent("""\
        [core]
        \tfsmonitor = $E/home-fsmonitor
        \thooksPath = $HOME/evil-hooks
        \tattributesFile = $HOME/.config/git/attributes
        [diff "home"]
        \ttextconv = $E/home-textconv
        [filter "home"]
        \tclean = $E/home-clean
        \tsmudge = $E/home-smudge
        """)
    attributes = "* diff=evil filter=evil merge=evil\n*.p filter=evilp\n*.inc filter=inc\n"
    lines += [f'cat >> "$G/config" <<EOF\n{config}EOF', f'cat > "$E/included.cfg" <<EOF\n{included}EOF',
              f"cat > .gitattributes <<'EOF'\n{attributes}EOF", f"cat > \"$G/info/attributes\" <<'EOF'\n{attributes}EOF",
              f"cat > \"$E/attributes\" <<'EOF'\n{attributes}EOF",
              f'cat > "$HOME/.gitconfig" <<EOF\n{home}EOF', 'cp "$HOME/.gitconfig" "$HOME/.config/git/config"',
              "printf '* diff=home filter=home\\n' > \"$HOME/.config/git/attributes\"",
              "echo changed >> README.md; echo new > new.txt; echo p > new.p; echo inc > new.inc"]
    return "\n".join(lines) + "\n"


def arm(workdir: Path, home: Path, marks: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(["sh", "-c", arm_script(marks)], cwd=workdir, check=True, env={**os.environ, "HOME": str(home)})


def fired(marks: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(marks.iterdir())} if marks.is_dir() else {}


def git(*args: str, cwd: Path | None = None, home: Path) -> str:
    """The test's own git (never on an armed clone)."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env=git_env("w001", home)).stdout.strip()


@pytest.fixture
def forge_repo(tmp_path) -> str:
    src, home = tmp_path / "src", tmp_path / "src-home"
    src.mkdir()
    git("init", "-q", "-b", "main", cwd=src, home=home)
    (src / "README.md").write_text("hello\n")
    (src / "tracked.inc").write_text("inc\n")
    git("add", "-A", cwd=src, home=home)
    git("commit", "-q", "-m", "start", cwd=src, home=home)
    git("clone", "-q", "--bare", str(src), str(tmp_path / "forge.git"), home=home)
    return str(tmp_path / "forge.git")


@pytest.fixture
def clone(tmp_path, forge_repo) -> tuple[Path, Path, Path]:
    """(run folder, workdir, HOME) of w001's clone, prepared by a host, with a merge in progress (a conflict)
    and nothing yet armed."""
    run, home = tmp_path / "run", tmp_path / "run" / "workers" / "w001" / "home"
    workdir = run / "workers" / "w001" / "repo"
    Workdirs(run, "h000").prepare("w001", workdir, home, forge_repo)
    git("checkout", "-q", "-b", "other", cwd=workdir, home=home)
    (workdir / "README.md").write_text("theirs\n")
    git("commit", "-qam", "theirs", cwd=workdir, home=home)
    git("checkout", "-q", "main", cwd=workdir, home=home)
    (workdir / "README.md").write_text("ours\n")
    git("commit", "-qam", "ours", cwd=workdir, home=home)
    subprocess.run(["git", "merge", "other"], cwd=workdir, capture_output=True, env=git_env("w001", home), check=False)
    assert (workdir / ".git" / "MERGE_HEAD").exists()
    return run, workdir, home


def test_fingerprint_runs_nothing_a_clone_configures(tmp_path, clone):
    _, workdir, home = clone
    marks = tmp_path / "marks"
    marks.mkdir()
    arm(workdir, home, marks)
    first = fingerprint(workdir)
    assert fired(marks) == {}
    (workdir / "new.txt").write_text("newer\n")
    assert fingerprint(workdir) != first
    assert fired(marks) == {}


def test_recover_and_prepare_run_nothing_a_clone_configures(tmp_path, clone, forge_repo):
    run, workdir, home = clone
    marks = tmp_path / "marks"
    marks.mkdir()
    arm(workdir, home, marks)
    again = Workdirs(run, "h000")  # the restarted host
    assert again.kept(workdir)
    done = again.recover("w001", workdir, home)
    again.prepare("w001", workdir, home, forge_repo + "#new-token")
    assert fired(marks) == {}, done
    assert "aborted the merge in progress" in done and "(failed)" not in done, done
    assert not (workdir / ".git" / "MERGE_HEAD").exists()
    assert "stashed the uncommitted changes" in done, done
    config = subprocess.run(["git", "config", "-f", str(workdir / ".git" / "config"), "remote.origin.url"],
                            capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, check=False).stdout.strip()
    assert config == forge_repo + "#new-token"


ATTRIBUTE_DRIVERS = {"clean", "smudge", "process", "included", "textconv", "diffcmd", "mergedriver"}
"""Programs a repository names by attribute (`filter.<name>`, `diff.<name>`, `merge.<name>`, any name, also
through an include): no `git -c` switch reaches them; only the sandbox does."""


def test_without_the_sandbox_only_drivers_named_by_attribute_can_run(tmp_path, clone, forge_repo):
    """The residual risk of a run without containment (`sandbox.enabled = False`, whose agents run on the host
    anyway): git's switches alone turn off every program of a fixed key (fsmonitor, every hook, ssh, editor,
    pager, askpass, credential helper, gpg, external diff, aliases) and all of the worker's HOME; only the
    filter drivers the attributes name run (here: the clean and process filters of `git stash`)."""
    run, workdir, home = clone
    marks = tmp_path / "marks"
    marks.mkdir()
    arm(workdir, home, marks)
    bare = Workdirs(run, "h000", sandboxed=False)
    done = bare.recover("w001", workdir, home)
    bare.prepare("w001", workdir, home, forge_repo)
    fingerprint(workdir)
    print("fired without the sandbox:", sorted(fired(marks)))
    assert set(fired(marks)) <= ATTRIBUTE_DRIVERS, (sorted(fired(marks)), done)
    assert not (workdir / ".git" / "MERGE_HEAD").exists()


def test_recover_touches_nothing_outside_the_clone(tmp_path, clone):
    """`core.worktree` names a folder of the host: a host-side `git stash --include-untracked` would move its
    files into the clone's stash (deleting them there)."""
    run, workdir, home = clone
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me\n")
    (workdir / "untracked.txt").write_text("mine\n")
    with open(workdir / ".git" / "config", "a") as f:
        f.write(f"[core]\n\tworktree = {victim}\n")
    Workdirs(run, "h000").recover("w001", workdir, home)
    assert (victim / "precious.txt").read_text() == "keep me\n"
    assert sorted(p.name for p in victim.iterdir()) == ["precious.txt"]


def test_a_clone_made_anew_under_an_armed_home_runs_nothing(tmp_path, forge_repo):
    """The worker's HOME outlives its clone (a clone lost or broken is made again): its .gitconfig is the agent's."""
    run = tmp_path / "run"
    workdir, home = run / "workers" / "w001" / "repo", run / "workers" / "w001" / "home"
    marks = tmp_path / "marks"
    marks.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    git("init", "-q", cwd=scratch, home=tmp_path / "h")
    arm(scratch, home, marks)  # HOME's .gitconfig and attributes name programs in scratch/.git/evil
    Workdirs(run, "h000").prepare("w001", workdir, home, forge_repo)
    assert (workdir / "README.md").read_text() == "hello\n"
    assert fired(marks) == {}


def test_fingerprint_is_bounded_and_follows_no_link(tmp_path, git_env):
    """A link to /dev/zero, a FIFO and a 200 MB sparse file: fingerprint returns, in a process limited to 1 GiB of
    address space (before: it read /dev/zero until it ran out of memory)."""
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a").write_text("1")
    subprocess.run(["git", "-C", str(repo), "add", "a"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "a"], check=True)
    (repo / "zero").symlink_to("/dev/zero")
    (repo / "sub").mkdir()
    (repo / "sub" / "etc").symlink_to("/etc")
    os.mkfifo(repo / "fifo")
    with open(repo / "huge", "wb") as f:
        f.truncate(200 * 2**20)
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\n"
            "from pathlib import Path\nfrom agensh_ray.worker.keep_going import fingerprint\nprint(fingerprint(Path(sys.argv[1])))\n")
    res = subprocess.run([sys.executable, "-c", code, str(repo)], capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(res.stdout.strip()) == 64
    assert fingerprint(repo) == res.stdout.strip()  # stable
    (repo / "zero").unlink()
    (repo / "zero").symlink_to("/dev/null")  # a link's target is what it holds
    assert fingerprint(repo) != res.stdout.strip()


def test_fingerprint_sees_every_kind_of_work_and_not_a_status(tmp_path, git_env):
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)

    def g(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    (repo / "a").write_text("1")
    g("add", "a")
    g("commit", "-qm", "a")
    seen = [fingerprint(repo)]
    g("status")  # refreshes the index: not work
    assert fingerprint(repo) == seen[0]

    def changed() -> None:
        now = fingerprint(repo)
        assert now not in seen, len(seen)
        seen.append(now)

    (repo / "a").write_text("2")  # a tracked file
    changed()
    (repo / "d").mkdir()
    (repo / "d" / "new").write_text("x")  # an untracked file in a new folder
    changed()
    g("add", "d/new")  # staged only
    changed()
    g("commit", "-qm", "more")  # HEAD moves
    changed()
    g("checkout", "-q", "-b", "topic")  # another branch, same commit: HEAD names another ref
    changed()
    g("reset", "-q", "--hard", "HEAD~1")  # the branch moves back
    changed()
    (repo / "link").symlink_to("a")
    changed()
    g("pack-refs", "--all")  # refs moved into packed-refs: the same work, yet a change is fine; then stable
    seen.append(fingerprint(repo))
    assert fingerprint(repo) == seen[-1]
    g("commit", "-q", "--allow-empty", "-m", "empty")  # HEAD moves with every ref packed
    changed()


def test_the_seed_mirror_and_the_score_clone_hold_no_forge_token(tmp_path, monkeypatch):
    """A demo-like run against the embedded forge: a host's seed mirror is made, then refreshed, and the
    checkpoints' score clone is made, then fetched into; no file under them holds a token (before: the seed's
    and the score clone's config kept the URL they were cloned from, the score clone's with the admin's token).
    Each worker's clone still reaches the forge with its own token."""
    from agensh_ray.task.checkpoint import fetch_main, main_commit
    from services.forge.embedded.forge import EmbeddedForge

    starter = tmp_path / "starter"
    starter.mkdir()
    (starter / "README.md").write_text("hello\n")
    forge = EmbeddedForge(tmp_path / "forge")
    forge.start()
    try:
        forge.init_repo(starter, "Build", "the thing")
        tokens = {w: forge.add_user(w) for w in ("w001", "w002")}
        forge.add_user("admin")
        run = tmp_path / "run"
        wd = Workdirs(run, "h000")
        monkeypatch.setattr(workdir_module, "SEED_MAX_AGE_S", 0.0)  # the second worker refreshes the seed
        for w in tokens:
            base = run / "workers" / w
            wd.prepare(w, base / "repo", base / "home", forge.clone_url(w))
        admin = forge.clone_url("admin")
        tokens["admin"] = admin.split("@")[0].rsplit(":", 1)[1]
        score = run / "score" / "main"
        first = fetch_main(score, admin)
        assert fetch_main(score, admin) == first == main_commit(admin)
        leaks = []
        for p in [*(run / "workers" / "_h000").rglob("*"), *score.rglob("*")]:
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                leaks += [(str(p), w) for w, t in tokens.items() if t.encode() in data]
        assert leaks == []
        assert wd.seed.is_dir() and "main" in git("branch", "--list", cwd=wd.seed, home=tmp_path / "h")
        w1 = run / "workers" / "w001" / "repo"
        (w1 / "mine.txt").write_text("x\n")
        git("add", "-A", cwd=w1, home=tmp_path / "h")
        git("commit", "-qm", "mine", cwd=w1, home=tmp_path / "h")
        git("push", "-q", "origin", "HEAD:refs/heads/w001/mine", cwd=w1, home=tmp_path / "h")
    finally:
        forge.close()


def _host_script(marks: Path) -> str:
    """The hostile agent's first turn: a merge in progress, uncommitted changes, then the clone and HOME armed."""
    merge = ("git checkout -q -b other && echo theirs > README.md && git commit -qam theirs && "
             "git checkout -q main && echo ours > README.md && git commit -qam ours; git merge other >/dev/null 2>&1; "
             "test -f .git/MERGE_HEAD && echo MERGING")
    return "test -d .git/evil && { echo ALREADY; exit 0; }\n" + merge + "\n" + arm_script(marks) + "echo ARMED\n"


async def test_a_whole_host_runs_nothing_its_hostile_worker_configured(tmp_path, git_env):
    """A real WorkerHost on the baseline (a fingerprint before and after each turn): its scripted agent arms its
    clone and HOME from inside its sandbox and ends its turn; the host is then restarted (stopped, and a new one
    launches the worker: recover, prepare, the hand-off summary, a turn). No marker appears on the host."""
    from tests.support import LocalServices, await_for

    run_dir = tmp_path / "run"
    services = LocalServices(run_dir, ["w001"])
    marks = tmp_path / "marks"
    marks.mkdir()
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    arm_sh = scripts / "arm.sh"
    arm_sh.write_text(_host_script(marks))
    script = scripts / "hostile.json"
    script.write_text(AgentScript(turns=[[Step(do="shell", text=f"sh {arm_sh} 2>&1")], []]).model_dump_json())
    harness = f"cmd:{sys.executable} -m agensh_ray.fakes.acp_agent --script {script} --log ~/agent.jsonl"
    from agensh_ray.config import SandboxConfig

    cfg = {"harness": harness, "baseline": True, "minutes": 30, "sandbox": SandboxConfig(read_only=[scripts])}
    try:
        host = services.host(run_dir, ["w001"], **cfg)
        await host.start()
        try:
            await host.launch("w001")
            w = host.workers["w001"]
            await await_for(lambda: w.turns_finished >= 1 and not w.in_turn, 120, "the arming turn to end")
            await await_for(lambda: w.keep_going is not None and w.keep_going.told >= 1, 60, "the stop hook")
        finally:
            await host.stop()
        log = [json.loads(line) for line in (run_dir / "workers" / "w001" / "home" / "agent.jsonl").read_text()
               .splitlines()]
        out = next(r for r in log if r["event"] == "step")["result"]["output"]
        assert "MERGING" in out and "ARMED" in out, out
        assert fired(marks) == {}, "after the turn (fingerprint)"
        again = services.host(run_dir, ["w001"], **cfg)  # the restarted host process
        await again.start()
        try:
            await again.launch("w001")
            w = again.workers["w001"]
            await await_for(lambda: w.turns_finished >= 1 and not w.in_turn, 120, "the resumed worker's turn")
        finally:
            await again.stop()
        assert fired(marks) == {}, "after the restart (recover, prepare, hand-off, fingerprint)"
        assert not (w.workdir / ".git" / "MERGE_HEAD").exists()
        told = [json.loads(line)["text"] for line in (w.home / "agent.jsonl").read_text().splitlines()
                if json.loads(line)["event"] == "prompt"]
        assert any("aborted the merge in progress; stashed the uncommitted changes" in t for t in told), told
    finally:
        services.close()


def test_a_checkpoint_runs_no_driver_a_pushed_tree_names(tmp_path, monkeypatch):
    """Pushed content carries no config (a clone copies none), but its `.gitattributes` names drivers: the host's
    own git configuration (the user's ~/.gitconfig: git-lfs's filter is the common case) must not be what runs
    them on a worker's bytes. The checkpoint's git reads no user or system configuration."""
    from agensh_ray.task.base import Task
    from agensh_ray.task.checkpoint import Checkpoints
    from agensh_ray.trace import TraceWriter, write_schema_files
    from tests.test_programbench import CALCULATOR

    marks = tmp_path / "marks"
    marks.mkdir()
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    prog = user_home / "prog"
    prog.write_text(f'#!/bin/sh\necho "$(id) $0 $*" >> {marks}/$(basename "$0")\nexec cat\n')
    prog.chmod(0o755)
    (user_home / ".gitconfig").write_text(f'[filter "lfs"]\n\tsmudge = {prog}\n\tclean = {prog}\n\tprocess = {prog}\n'
                                         f'[core]\n\tfsmonitor = {prog}\n')
    origin = tmp_path / "origin"
    origin.mkdir()
    (origin / "compile.sh").write_text("#!/bin/sh\nprintf '#!/bin/sh\\nexit 0\\n' > executable\nchmod +x executable\n")
    (origin / ".gitattributes").write_text("* filter=lfs diff=lfs\n")
    env = {**git_env("w001", tmp_path / "h"), "GIT_CONFIG_GLOBAL": "/dev/null"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "pushed"]):
        subprocess.run(["git", *args], cwd=origin, check=True, capture_output=True, env=env)
    monkeypatch.setenv("HOME", str(user_home))
    run_dir = tmp_path / "run"
    write_schema_files(run_dir)
    trace = TraceWriter(run_dir, "driver", "r", flush_interval_s=0)
    ckpt = Checkpoints(Task.load(str(CALCULATOR)), run_dir, trace)
    ckpt.run("periodic", str(origin))  # a clone
    ckpt.run("final", str(origin))  # a fetch and a reset of the kept score clone (main unchanged: not scored again)
    trace.close()
    assert fired(marks) == {}
    assert (run_dir / "score" / "main" / ".gitattributes").exists() and ckpt.reused == 1


def test_fingerprint_stops_at_its_file_cap(tmp_path, monkeypatch):
    """A tree past MAX_FILES entries (a node_modules): the walk stops there, says so in the hash, and still sees
    an edit among the entries it read."""
    from agensh_ray.worker import keep_going

    monkeypatch.setattr(keep_going, "MAX_FILES", 100)
    repo = tmp_path / "r"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    for i in range(3):
        (repo / f"d{i}").mkdir()
        for j in range(100):
            (repo / f"d{i}" / f"f{j:03d}").write_text("x")
    first = fingerprint(repo)
    assert first == fingerprint(repo)
    monkeypatch.setattr(keep_going, "MAX_FILES", 1000)
    assert fingerprint(repo) != first  # the whole tree hashes differently from its capped part
    monkeypatch.setattr(keep_going, "MAX_FILES", 100)
    (repo / "d0" / "f000").write_text("y")
    assert fingerprint(repo) != first
