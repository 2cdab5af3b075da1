"""Run storage on an object store (issue 17): `--run-dir s3://bucket/prefix` against a real S3-compatible
server started here (moto in server mode on 127.0.0.1, stopped by its pid), with the store unreachable for
a while (`Gate` refuses connections and cuts open ones).

The URI and its checks before Ray starts; the mirror (agensh_ray/mirror.py) shipping appends and rolled
files, buffering through an outage with a warning, nothing lost; the restore of a missing folder from the
store (an actor restarted on another node), through the board actor's own hook too; and the whole demo run on the store, the store gone for 20 s
mid-run, then the report read from the URI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from agensh_ray import mirror, storage
from agensh_ray.errors import RunFolderError
from agensh_ray.paths import PROJECT_ROOT
from agensh_ray.run import main
from tests.s3_server import Gate, MotoServer, free_port
from tests.support import wait_for

pytestmark = pytest.mark.cluster

BUCKET = "agensh-runs"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


@pytest.fixture
def s3(tmp_path, monkeypatch):
    """moto_server behind a Gate, a bucket, and the settings a run reads (endpoint and credentials in the
    environment, staging and cache folders under tmp_path)."""
    server = MotoServer(tmp_path / "moto.log")
    gate = None
    try:
        gate = Gate(server.port)
        env = {**CREDS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{gate.port}",
               "AGENSH_STAGING_DIR": str(tmp_path / "staging"), "AGENSH_CACHE_DIR": str(tmp_path / "cache")}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        from pyarrow import fs

        fs.S3FileSystem(endpoint_override=f"127.0.0.1:{server.port}", scheme="http", region="us-east-1",
                        allow_bucket_creation=True).create_dir(BUCKET)
        yield gate, env
    finally:
        mirror.close_all(timeout_s=0)
        if gate is not None:
            gate.close()
        server.stop()


def remote_bytes(uri: str, rel: str) -> bytes | None:
    loc = storage.StoreURI.parse(uri)
    try:
        with loc.filesystem(connect_timeout=1, request_timeout=3, attempts=1).open_input_stream(
                f"{loc.path}/{rel}") as f:
            return f.read()
    except OSError:
        return None


# -- the URI and the checks before Ray starts -----------------------------------------------------------------

def test_uris_parse_and_bad_ones_say_why(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    loc = storage.StoreURI.parse("s3://b/runs/x?endpoint=http://127.0.0.1:9000&region=eu-west-1")
    assert (loc.bucket, loc.key, loc.endpoint, loc.region) == ("b", "runs/x", "http://127.0.0.1:9000", "eu-west-1")
    assert loc.child("r1").path == "b/runs/x/r1" and loc.child("r1").uri.startswith("s3://b/runs/x/r1?endpoint=")
    for bad, why in [("gs://b/p", "unsupported object store 'gs'"), ("s3:///p", "no bucket name"),
                     ("s3://key:secret@b/p", "no bucket name"), ("s3://b/p?colour=red", "unknown option(s) colour"),
                     ("s3://b/a//c", "empty, '.' or '..' part"), ("s3://b/p?endpoint=ftp://h", "not an http")]:
        with pytest.raises(RunFolderError, match=why.replace("(", r"\(").replace(")", r"\)")):
            storage.StoreURI.parse(bad)


def refused(capsys, *argv: str) -> str:
    ray_before = ray.is_initialized()
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2 and ray.is_initialized() == ray_before
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    return err.splitlines()[-1]


def test_cli_refuses_unusable_stores_before_ray(s3, capsys, monkeypatch, tmp_path):
    gate, _ = s3
    assert "unsupported object store 'gs'" in refused(capsys, "--run-dir", "gs://b/p")
    assert "bucket 'nope' does not exist" in refused(capsys, "--run-dir", "s3://nope/p")
    dead = f"s3://{BUCKET}/p?endpoint=http://127.0.0.1:{free_port()}"
    t = time.monotonic()
    assert "the object store cannot be used" in refused(capsys, "--run-dir", dead)
    assert time.monotonic() - t < 20  # said in seconds, not after the SDK's minutes of retries
    # an earlier run's folder on the store, as for a local one
    loc = storage.StoreURI.parse(f"s3://{BUCKET}/runs").child("old")
    with loc.filesystem().open_output_stream(f"{loc.path}/config.json") as f:
        f.write(b"{}")
    assert "holds an earlier run" in refused(capsys, "--run-dir", f"s3://{BUCKET}/runs", "--run-id", "old")


def test_analysis_refuses_a_uri_that_holds_no_run(s3, tmp_path):
    """The report and the queries say plainly when an s3:// run folder is not one (or the store is away)."""
    gate, env = s3
    for uri, why in [(f"s3://{BUCKET}/runs/none", "is not a run folder: it has no config.json"),
                     (f"s3://{BUCKET}/runs/x?endpoint=http://127.0.0.1:{free_port()}", "cannot be read")]:
        res = subprocess.run([sys.executable, "-m", "agensh_ray.analysis.report", uri, "--out", str(tmp_path / "r")],
                             cwd=PROJECT_ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and why in res.stderr and "Traceback" not in res.stderr, res.stderr


# -- the mirror -----------------------------------------------------------------------------------------------

def test_mirror_ships_buffers_through_an_outage_and_loses_nothing(s3, tmp_path):
    gate, _ = s3
    run_dir = storage.staging_parent(f"s3://{BUCKET}/runs") / "r1"
    (run_dir / "board").mkdir(parents=True)
    log = run_dir / "board" / "board.jsonl"
    warnings: list[str] = []
    m = mirror.Mirror(run_dir, storage.StoreURI.parse(f"s3://{BUCKET}/runs").child("r1"), interval_s=0.2,
                      warn=warnings.append)
    m.own("board/**/*", "trace/*/board-*.parquet")
    m.start()
    uri = m.remote.uri

    def append(i: int) -> None:
        with open(log, "a") as f:
            f.write(json.dumps({"seq": i}) + "\n")

    append(1)
    t0 = time.monotonic()
    wait_for(lambda: remote_bytes(uri, "board/board.jsonl") == log.read_bytes(), 10, "the first append shipped")
    first_lag = time.monotonic() - t0
    (run_dir / "trace" / "board").mkdir(parents=True)
    (run_dir / "trace" / "board" / "board-1-ab-00000.parquet").write_bytes(b"PAR1")
    (run_dir / "trace" / "board" / "other-1-ab-00000.parquet").write_bytes(b"not mine")
    gate.close()
    t_down = time.monotonic()
    for i in range(2, 50):  # the writer goes on: appends land locally, acknowledged as before
        append(i)
    wait_for(lambda: any("unreachable" in w for w in warnings), 15, "the outage warning")
    assert f"{log.parent.parent}" in warnings[0] and "nothing written is lost" in warnings[0]
    assert remote_bytes(uri, "board/board.jsonl") is None  # really unreachable
    gate.open()
    t_up = time.monotonic()
    wait_for(lambda: remote_bytes(uri, "board/board.jsonl") == log.read_bytes(), 30, "the backlog shipped")
    drained = time.monotonic() - t_up
    assert remote_bytes(uri, "trace/board/board-1-ab-00000.parquet") == b"PAR1"
    assert remote_bytes(uri, "trace/board/other-1-ab-00000.parquet") is None  # another process's file
    wait_for(lambda: any("reachable again" in w for w in warnings), 10, "the all-clear")
    rep = m.close(timeout_s=5)
    assert rep.pending == 0 and rep.outages == 1 and rep.outage_s >= time.monotonic() - t_down - drained - 5
    print(f"\nmirror: first append shipped in {first_lag:.2f} s; outage of {t_up - t_down:.1f} s drained "
          f"{drained:.2f} s after the store came back; lag p50 {rep.lag_p50_s} s, max {rep.lag_max_s} s")


def test_restore_fetches_a_missing_folder_from_the_store(s3, tmp_path):
    """A board, chat or forge restarted on a node whose staging copy lacks its folder reloads its log."""
    base = f"s3://{BUCKET}/runs"
    run_dir = storage.staging_parent(base) / "r2"
    (run_dir / "chat").mkdir(parents=True)
    (run_dir / "chat" / "chat.jsonl").write_text('{"seq": 1}\n{"seq": 2}\n')
    (run_dir / "chat" / "sub").mkdir()
    (run_dir / "chat" / "sub" / "x.lock").write_text("lock")  # never shipped
    m = mirror.Mirror(run_dir, storage.StoreURI.parse(base).child("r2"))
    m.own("chat/**/*")
    assert m.flush(timeout_s=10).pending == 0
    shutil.rmtree(run_dir)  # another node: no staging copy
    assert storage.restore(run_dir / "chat") == 1
    assert (run_dir / "chat" / "chat.jsonl").read_text() == '{"seq": 1}\n{"seq": 2}\n'
    assert not (run_dir / "chat" / "sub").exists()
    assert storage.restore(run_dir / "chat") == 0  # here already: nothing fetched, nothing overwritten
    assert storage.restore(tmp_path / "local-run" / "chat") == 0  # a local run: nothing to do
    (run_dir / "chat" / "chat.jsonl").unlink()
    (run_dir / "chat").rmdir()
    assert mirror.attach(run_dir / "chat", restore_missing=True) is not None  # the actors' one call
    assert (run_dir / "chat" / "chat.jsonl").is_file()


def test_a_board_actor_on_a_node_without_the_staging_copy_reloads_its_log(s3, ray_session, tmp_path):
    """The board actor's own hook: its log shipped, the staging copy gone (another node), a new board actor
    over the same log path fetches it and numbers on from the entries it held."""
    from agensh_ray.actors.board import BoardActor, BoardHandle
    from agensh_ray.models import BoardEntryIn

    gate, env = s3
    run_dir = storage.staging_parent(f"s3://{BUCKET}/runs") / "r3"
    log = run_dir / "board" / "board.jsonl"
    opts = {"runtime_env": {"env_vars": env}, "max_restarts": 0}  # the store's settings in the actor's process

    def board() -> BoardHandle:
        return BoardHandle(BoardActor.options(**opts).remote(str(log), None, 1.0, time.time(), str(run_dir), "r3"))

    first = board()
    for i in range(3):
        first.write(BoardEntryIn(type="FACT", text=f"fact {i}", worker_id="w1"))
    ray.get(first.actor.close.remote())  # the actor's trace closed: its mirror flushed (board log included)
    first.kill()
    assert remote_bytes(storage.run_uri_of(run_dir)[1].uri, "board/board.jsonl") == log.read_bytes()
    shutil.rmtree(run_dir)
    second = board()
    try:
        assert [e.text for e in second.recent()] == ["fact 0", "fact 1", "fact 2"]
        assert second.write(BoardEntryIn(type="FACT", text="fact 3", worker_id="w1")).seq == 4
    finally:
        second.kill()


# -- the whole run --------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_run_on_s3_with_the_store_gone_for_20s(s3, tmp_path):
    """The demo (3 sim workers, 80 schedule minutes: 40 s at x120; unsandboxed to spare the machine) with `--run-dir
    s3://...`: the store unreachable for 20 s mid-run (a run ending meanwhile waits for the store to ship), then
    back; the run finishes, the store holds every file of the staging copy byte for byte, and the report
    reads the run from the URI (the staging copy deleted first)."""
    gate, env = s3
    base = f"s3://{BUCKET}/runs"
    uri = f"{base}/s3demo"
    staging = storage.staging_parent(base) / "s3demo"
    out = open(tmp_path / "run.out", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agensh_ray.run", "--workers", "3", "--minutes", "80", "--run-dir", base,
         "--run-id", "s3demo", "--no-sandbox"], cwd=PROJECT_ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True)
    t_start = time.monotonic()
    try:
        local_log = staging / "board" / "board.jsonl"
        wait_for(lambda: remote_bytes(uri, "board/board.jsonl") or proc.poll() is not None, 120,
                 "the board's log on the store")
        assert proc.poll() is None, (tmp_path / "run.out").read_text()
        # the ship lag: from a new size of the log seen here to that size on the store
        lags, last = [], local_log.stat().st_size
        t_end = time.monotonic() + 8

        def grown() -> int:  # the log's next size, or -1 once the window is over
            size = local_log.stat().st_size
            return size if size != last else -(time.monotonic() >= t_end or proc.poll() is not None)

        while (size := wait_for(grown, 30, "the next append to the board's log", step=0.01)) > 0:
            t, last = time.monotonic(), size
            wait_for(lambda: len(remote_bytes(uri, "board/board.jsonl") or b"") >= size, 30, "the log shipped")
            lags.append(time.monotonic() - t)
        gate.close()
        t_down = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):  # 20 s of outage, and the run goes on through it
            proc.wait(20)
        size_at_return = local_log.stat().st_size
        gate.open()
        t_up = time.monotonic()
        wait_for(lambda: len(remote_bytes(uri, "board/board.jsonl") or b"") >= size_at_return, 60,
                 "the board's backlog shipped")
        drained = time.monotonic() - t_up
        assert proc.wait(240) == 0, (tmp_path / "run.out").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        out.close()
    wall = time.monotonic() - t_start
    text = (tmp_path / "run.out").read_text()
    assert "unreachable" in text and "reachable again" in text, text  # the driver's warning, on its stderr
    assert f"run folder     {uri}" in text and "object store   everything shipped" in text, text
    summary = json.loads(remote_bytes(uri, "summary.json"))
    assert summary["storage"]["pending"] == 0 and summary["storage"]["outages"] >= 1
    # nothing lost: every file of the staging copy (but the workers' clones and the reference) on the store
    shipped = tmp_path / "shipped"
    storage.download(storage.StoreURI.parse(uri), shipped)
    local = {p.relative_to(staging).as_posix(): p for p in staging.rglob("*") if p.is_file()
             and p.relative_to(staging).parts[0] not in storage.NOT_SHIPPED and not p.name.endswith(mirror.SKIP_SUFFIXES)
             and p.name != "reaper.log"}  # the reaper writes its last lines after the driver is gone
    # (and shipped its part before it went)
    remote = {p.relative_to(shipped).as_posix(): p for p in shipped.rglob("*") if p.is_file() and p.name != "reaper.log"}
    assert sorted(local) == sorted(remote)
    assert [k for k in local if local[k].read_bytes() != remote[k].read_bytes()] == []
    assert any(k.startswith("forge/") for k in remote) and "chat/chat.jsonl" in remote
    entries = len(local["board/board.jsonl"].read_text().splitlines())
    # the report, and SQL, from the URI alone
    shutil.rmtree(staging)
    rep = subprocess.run([sys.executable, "-m", "agensh_ray.analysis.report", uri, "--out", str(tmp_path / "report")],
                         cwd=PROJECT_ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert (tmp_path / "report" / "report.html").stat().st_size > 10_000
    from agensh_ray.analysis.views import connect

    assert connect(uri).execute("SELECT count(*) FROM board").fetchone()[0] == entries > 0
    lags.sort()
    lag = f"p50 {lags[len(lags) // 2]:.2f} s, max {max(lags):.2f} s" if lags else "no append in the window"
    print(f"\ns3 demo: {wall:.0f} s; ship lag of the board's log {lag} ({len(lags)} appends); outage {t_up - t_down:.1f} s, drained {drained:.2f} s after "
          f"the store came back; {entries} board entries, {len(remote)} files on the store")
