"""The run's command line refuses what it cannot run, before Ray starts: exit code 2 and a message naming
the flag. Each case calls `agensh_ray.run.main` in-process (argparse exits with 2); none starts Ray."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import ray
from pydantic import ValidationError

from agensh_ray import runfolder
from agensh_ray.config import RoutingConfig, RunConfig
from agensh_ray.errors import RunFolderError
from agensh_ray.paths import PROJECT_ROOT
from agensh_ray.run import main, parse_args


def refused(capsys, *argv: str) -> str:
    """Run the CLI; assert it exits with 2 and return what it said on stderr."""
    ray_before = ray.is_initialized()  # the suite's shared Ray may be up already: this call must not start one
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    assert ray.is_initialized() == ray_before
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize("flag", ["--minutes", "--hours", "--time-scale"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_zero_or_negative_lengths_and_scales_are_refused(capsys, flag, value, tmp_path):
    """Before, 0 was read as "not given" (`a.minutes if a.minutes else 240`): 240 minutes at x120."""
    err = refused(capsys, flag, value, "--run-dir", str(tmp_path))
    assert f"argument {flag}: must be a positive number, got {value}" in err


def test_zero_routers_are_refused(capsys, tmp_path):
    """Before, the driver silently used 1."""
    err = refused(capsys, "--routers", "0", "--run-dir", str(tmp_path))
    assert "argument --routers: must be at least 1, got 0" in err
    with pytest.raises(ValidationError):
        RoutingConfig(routers=0)


def test_zero_checkpoint_interval_is_refused(capsys, tmp_path):
    err = refused(capsys, "--checkpoint-every", "0", "--run-dir", str(tmp_path))
    assert "argument --checkpoint-every: must be a positive number" in err


def test_sim_knobs_out_of_range_are_refused(capsys, tmp_path):
    assert "--think: Input should be greater than or equal to 0" in refused(capsys, "--think", "-1",
                                                                             "--run-dir", str(tmp_path))
    assert "--bug-rate: Input should be less than or equal to 1" in refused(capsys, "--bug-rate", "1.5",
                                                                             "--run-dir", str(tmp_path))


def test_run_dir_that_is_a_file_is_refused(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert f"--run-dir {f} is a file, not a folder" in refused(capsys, "--run-dir", str(f))


def test_run_dir_under_a_file_is_refused(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    err = refused(capsys, "--run-dir", str(f / "runs"))
    assert f"--run-dir {f / 'runs'} cannot be used: Not a directory" in err


def test_a_services_resource_without_a_cluster_is_refused(capsys, tmp_path):
    """A local Ray instance declares no custom resource: refused before Ray starts, not after."""
    err = refused(capsys, "--services-resource", "services", "--run-dir", str(tmp_path))
    assert "--services-resource names a resource of a cluster's nodes: it needs --address" in err


@pytest.mark.parametrize("where", ["/proc/agensh-runs", "/sys/agensh-runs", "/dev/shm/../agensh-runs"])
def test_run_dir_under_a_kernel_filesystem_is_refused(capsys, where):
    err = refused(capsys, "--run-dir", where)
    assert f"--run-dir {where} is under /" in err and "a kernel filesystem" in err


def test_unwritable_run_dir_is_refused():
    """A folder only root may write, used by an ordinary user (the test runs as root, which writes
    anywhere): the CLI runs as `nobody`."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the CLI as another user")
    base = Path(tempfile.mkdtemp(prefix="agensh-ro-"))
    try:
        base.chmod(0o755)
        (base / "ro").mkdir(mode=0o555)
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        ran = subprocess.run([*as_nobody, sys.executable, "-m", "agensh_ray.run", "--run-dir", str(base / "ro" / "runs")],
                             cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "HOME": str(base)})
        assert ran.returncode == 2, ran.stderr
        assert f"--run-dir {base / 'ro' / 'runs'} cannot be used: Permission denied" in ran.stderr
        assert "Traceback" not in ran.stderr
    finally:
        (base / "ro").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("run_id", ["../../x", "a/b", "..", ".", "x/../y", "-x", ".hidden", "a" * 129])
def test_run_ids_that_are_not_one_folder_name_are_refused(capsys, tmp_path, run_id):
    """Before, `--run-id ../../x` wrote outside --run-dir."""
    err = refused(capsys, "--run-dir", str(tmp_path / "runs"), f"--run-id={run_id}")
    assert f"run id {run_id!r} must be one folder name" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, not even --run-dir
    with pytest.raises(ValidationError):
        RunConfig(run_id=run_id)


def test_an_earlier_runs_folder_is_refused_without_overwrite(capsys, tmp_path):
    old = tmp_path / "r1"
    old.mkdir()
    (old / "config.json").write_text("{}")
    err = refused(capsys, "--run-dir", str(tmp_path), "--run-id", "r1")
    assert f"run folder {old} holds an earlier run" in err and "--overwrite" in err
    assert (old / "config.json").read_text() == "{}"  # untouched


def test_overwrite_empties_the_earlier_runs_folder(tmp_path):
    old = tmp_path / "r1"
    (old / "board").mkdir(parents=True)
    (old / "board" / "board.jsonl").write_text("old\n")
    (old / "config.json").write_text("{}")
    (old / "summary.json").write_text("{}")
    cfg = parse_args(["--run-dir", str(tmp_path), "--run-id", "r1", "--overwrite"])
    assert cfg.overwrite and cfg.run_id == "r1"
    assert (old / "summary.json").exists()  # checking the command line removes nothing
    assert runfolder.prepare(cfg.run_dir, "r1", cfg.overwrite) == old.resolve()
    assert list(old.iterdir()) == []


def test_a_new_or_empty_run_folder_is_accepted(tmp_path):
    (tmp_path / "empty").mkdir()
    assert runfolder.check_folder(tmp_path, "empty", overwrite=False) == (tmp_path / "empty").resolve()
    assert runfolder.prepare(tmp_path / "new-parent", "r2", overwrite=False).is_dir()


def test_a_run_folder_leading_outside_run_dir_is_refused(tmp_path):
    """A run id is one name, but that name may be a symlink out of --run-dir."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r1").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(RunFolderError, match="is outside --run-dir"):
        runfolder.check_folder(tmp_path / "runs", "r1", overwrite=False)


def test_a_baseline_of_several_workers_is_refused(capsys, tmp_path):
    err = refused(capsys, "--baseline", "--workers", "4", "--run-dir", str(tmp_path))
    assert "baseline runs one worker" in err


def test_a_config_file_is_checked_as_the_flags_are(capsys, tmp_path):
    """--config FILE (an experiment's configs/<cell>.json): the whole RunConfig, refused with exit 2 when wrong."""
    good = tmp_path / "good.json"
    good.write_text(RunConfig(workers=1, baseline=True, run_dir=tmp_path, run_id="c").model_dump_json())
    cfg = parse_args(["--config", str(good)])
    assert cfg.baseline and cfg.run_id == "c" and not cfg.board_tools
    bad = tmp_path / "bad.json"
    bad.write_text('{"workers": 1, "workerz": 2}')
    assert "workerz" in refused(capsys, "--config", str(bad))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "config.json").write_text("{}")  # an earlier run's folder, and no overwrite in the file
    assert "--overwrite" in refused(capsys, "--config", str(good))


def _killed_run(folder: Path, **state) -> None:
    """What a run whose driver was SIGKILLed leaves: its config.json and driver.json, no summary.json."""
    from agensh_ray.driver.resume import DriverState

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(RunConfig(run_id=folder.name, run_dir=folder.parent).model_dump_json())
    fields = dict(run_id=folder.name, pid=2**22 + 1, hostname="elsewhere", t0=1.0, start_wall=2.0) | state
    (folder / "driver.json").write_text(DriverState(**fields).model_dump_json())


def test_resume_takes_the_runs_own_settings_and_refuses_others(capsys, tmp_path):
    _killed_run(tmp_path / "r1")
    cfg = parse_args(["--resume", "r1", "--run-dir", str(tmp_path), "--address", "10.0.0.1:6379"])
    assert cfg.resume and cfg.run_id == "r1" and cfg.address == "10.0.0.1:6379" and not cfg.overwrite
    err = refused(capsys, "--resume", "r1", "--run-dir", str(tmp_path), "--workers", "3", "--no-gateway")
    assert "--resume goes on with the run's own settings (its config.json): drop --gateway, --workers" in err


def test_resume_refuses_a_run_that_is_missing_finished_not_started_or_still_driven(capsys, tmp_path):
    assert "nothing to resume in" in refused(capsys, "--resume", "nope", "--run-dir", str(tmp_path))
    _killed_run(tmp_path / "done")
    (tmp_path / "done" / "summary.json").write_text("{}")
    assert "run done has finished" in refused(capsys, "--resume", "done", "--run-dir", str(tmp_path))
    _killed_run(tmp_path / "early")
    (tmp_path / "early" / "driver.json").unlink()
    err = refused(capsys, "--resume", "early", "--run-dir", str(tmp_path))
    assert "stopped before its workers were up" in err and "--overwrite" in err
    # its driver is still running on this machine (a process whose command line is a run's driver)
    import socket

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "agensh_ray.run"])
    try:
        _killed_run(tmp_path / "live", pid=proc.pid, hostname=socket.gethostname())
        err = refused(capsys, "--resume", "live", "--run-dir", str(tmp_path))
        assert f"driver (pid {proc.pid}) is still running" in err
    finally:
        proc.kill()
        proc.wait()
    # a driver.json that is not one: said, not a traceback
    _killed_run(tmp_path / "bad")
    (tmp_path / "bad" / "driver.json").write_text("{not json")
    assert "is not a driver state" in refused(capsys, "--resume", "bad", "--run-dir", str(tmp_path))


def test_resume_takes_an_interrupted_run_and_one_driver_at_a_time(tmp_path):
    """A run stopped by a signal (summary "ended": "interrupted") may be resumed; two drivers on one folder may not."""
    import fcntl

    from agensh_ray.driver.resume import read_state

    _killed_run(tmp_path / "stopped")
    (tmp_path / "stopped" / "summary.json").write_text('{"ended": "interrupted"}')
    assert read_state(tmp_path / "stopped").run_id == "stopped"
    with open(tmp_path / "stopped" / ".driver.lock", "a") as held:  # another driver holds the folder
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        from agensh_ray.driver import Run
        from agensh_ray.task import Task

        cfg = parse_args(["--resume", "stopped", "--run-dir", str(tmp_path)])
        run = Run(cfg, Task.load("textkit"))
        with pytest.raises(RunFolderError, match="another driver is running run stopped"):
            run._load_state()


def test_resume_refusals_are_their_reason_alone_without_the_usage_text(capsys, tmp_path):
    """Before, `--resume` on a run that stopped before its workers were up printed its reason under the whole
    usage text (argparse's error); now as the checks after parsing: `error: <reason>`, exit 2."""
    _killed_run(tmp_path / "early")
    (tmp_path / "early" / "driver.json").unlink()
    for argv in (["--resume", "early"], ["--resume", "nope"], ["--resume", "early", "--workers", "3"]):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--run-dir", str(tmp_path)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "usage:" not in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
