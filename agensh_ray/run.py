"""`python -m agensh_ray.run`: one run, from bootstrap to summary.

bootstrap (repo seeded from the task, issue #1 = task text, protected main,
one forge user per worker, the chat) -> staggered launch -> progress lines
while the workers run -> wind-down (the hosts send the notices) -> deadline
or, for the demo, quiescence -> stop the workers, score main against the
hidden tests, write summary.json.

With no flags it runs the demo: 8 `sim` workers on the bundled textkit task,
all services embedded, compressed time.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from agensh_ray import runfolder
from agensh_ray.agent import sandbox
from agensh_ray.agent.harness import get_harness
from agensh_ray.config import (
    GatewayConfig, ModelLimit, RoutingConfig, RunConfig, SandboxConfig, ServicesConfig, SimConfig,
)
from agensh_ray.errors import (
    CapacityError, ForcedStop, HarnessError, RunFolderError, SandboxUnavailable, TaskError,
)
from agensh_ray.task import Task

log = logging.getLogger("agensh.run")

DEMO_TIME_SCALE = 120.0
VERBOSE = False


def positive(text: str) -> float:
    """argparse type: a number above 0 (a length or a scale: 0 would mean "forever" or "never")."""
    value = float(text)
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def run_dir_arg(text: str) -> Path | str:
    """argparse type: an object store's URI stays a string (agensh_ray/storage.py), anything else a path."""
    return text if "://" in text else Path(text)


def at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def parse_args(argv: list[str] | None = None) -> RunConfig:
    p = argparse.ArgumentParser(
        prog="python -m agensh_ray.run",
        description=(
            "Run N identical coding agents on one repository with no orchestrator. With no flags: the demo "
            "(8 sim workers rebuild the bundled textkit task on embedded services, about 2 minutes)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--workers", type=int, default=None,
                   help="number of identical workers (1 to 1,024; default 8, or 1 with --baseline)")
    p.add_argument("--baseline", action="store_true",
                   help="the single-agent baseline: one worker, no board, chat or routers, its own prompt "
                   "(prompts/baseline.md); each time the agent ends its turn before the deadline it is told to keep "
                   "going (prompts/keep_going.md), until the deadline or --baseline-idle-turns turns in a row "
                   "without work. Same task, scoring and trace tables (board and messages stay empty)")
    p.add_argument("--baseline-idle-turns", type=at_least_one, default=3,
                   help="baseline: consecutive turns without work (no edit, commit or PR) that end the run")
    p.add_argument("--task", default="textkit",
                   help="programbench:<instance_id> (ProgramBench's catalogue; needs Docker), a bundled task's name, "
                   "or a folder in ProgramBench's task format (python -m agensh_ray.tasks list)")
    p.add_argument("--checkpoint-every", type=positive, default=30.0,
                   help="schedule minutes between checkpoints (main scored by ProgramBench's rules; one more at the end)")
    p.add_argument(
        "--harness",
        default="sim",
        help="agent CLI behind ACP: sim, copilot, claude, codex, gemini, or cmd:<command line> for any ACP agent",
    )
    p.add_argument("--model", default=None, metavar="NAME",
                   help="the model every agent asks for (default: the harness's model variable, e.g. COPILOT_MODEL, "
                   "else its default: copilot gpt-4.1, claude claude-sonnet-4-5, codex gpt-5-codex, gemini "
                   "gemini-2.5-pro; docs/real-agents.md says how each CLI is told)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=positive, help="run length in schedule minutes (default 240)")
    length.add_argument("--hours", type=positive, help="run length in schedule hours")
    p.add_argument(
        "--time-scale",
        type=positive,
        default=None,
        help=f"schedule seconds per wall second; compresses every schedule constant (default {DEMO_TIME_SCALE:g} "
        "for the sim harness, 1 for real agents)",
    )
    p.add_argument("--run-dir", type=run_dir_arg, default=Path("runs"),
                   help="parent folder of run folders: a local path, or an object store as s3://bucket/prefix"
                   "[?endpoint=http://host:port] (endpoint and credentials otherwise from AWS_ENDPOINT_URL, "
                   "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION); the run is written to a local staging "
                   "copy and shipped there every 2 s (README, 'Where the run goes')")
    p.add_argument("--run-id", default=None,
                   help="run id, the run folder's name under --run-dir (default: a UTC timestamp)")
    p.add_argument("--overwrite", action="store_true",
                   help="reuse the folder of an earlier run with this --run-id, removing its contents first "
                   "(without it such a folder is refused; --resume goes on with it instead)")
    p.add_argument("--resume", default=None, metavar="RUN_ID",
                   help="go on with the run RUN_ID under --run-dir whose driver died or was interrupted: "
                   "its settings from its config.json, its schedule from its start, its board, chat, forge and "
                   "clones as they are; only --run-dir, --address, --no-ship-code and -v may come with it")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    # -- services (services/registry.py; production: services/README.md) --
    from agensh_ray.services.registry import CHATS, FORGES

    p.add_argument("--forge", default="embedded", choices=list(FORGES), help="forge implementation")
    p.add_argument("--chat", default="embedded", choices=list(CHATS), help="chat implementation")
    p.add_argument("--secrets", type=Path, default=None,
                   help="gitea/mattermost: the secrets file python -m agensh_ray.bootstrap wrote")
    p.add_argument("--gitea-url", default=None, help="gitea: base URL; omitted: the one in --secrets")
    p.add_argument("--mattermost-url", default=None, help="mattermost: base URL; omitted: the one in --secrets")
    p.add_argument("--intake-listen", default=None,
                   help="gitea: host:port of the webhook intake; omitted: 0.0.0.0 and the port of the "
                   "bootstrap's --intake-url")
    p.add_argument("--workers-per-actor", type=at_least_one, default=1, help="workers hosted per WorkerActor (simulation)")
    p.add_argument("--launch-interval", type=float, default=30.0, help="schedule seconds between launches (first hour)")
    p.add_argument("--policy", choices=["all", "relevant"], default="all", help="board delivery policy")
    p.add_argument("--routers", type=at_least_one, default=2, help="number of RouterActors")
    p.add_argument("--claims", choices=["lease", "legacy"], default="lease",
                   help="claim rule (agensh_ray/board/leases.py): lease (a floor in wall seconds, renewed by the "
                        "holder's activity, found by key, overlaps pushed) or legacy (the TTL / time scale, an ablation)")
    p.add_argument("--no-stop-when-done", action="store_true", help="run to the deadline even when all are idle")
    p.add_argument("--address", default=None, help="Ray address (auto joins a running cluster); default: local")
    p.add_argument("--no-ship-code", action="store_true",
                   help="with --address: do not ship this checkout to the nodes (they have it at the same path)")
    p.add_argument("--services-resource", default=None, metavar="NAME",
                   help="with --address: run the board, chat, forge and routers on nodes that declare this Ray "
                        "resource (restarted on another such node if theirs is lost); default: the driver's node")
    p.add_argument("--queue", action="store_true",
                   help="with fewer free agent slots than workers, wait for slots instead of refusing")
    p.add_argument("--worker-memory-mb", type=int, default=None,
                   help="memory Ray reserves per worker (default 450 for real agents, 0 for sim)")
    # -- the model gateway (docs/real-agents.md) --
    gw = p.add_mutually_exclusive_group()
    gw.add_argument("--gateway", dest="gateway", action="store_true", default=None,
                    help="agents reach their model through the run's gateway (default: yes for a real harness whose "
                    "endpoint or key is set; an error if it cannot stand in for the harness's endpoint)")
    gw.add_argument("--no-gateway", dest="gateway", action="store_false", help="agents call their provider directly")
    p.add_argument("--gateway-config", type=Path, default=None,
                   help="JSON file of gateway settings (limits per provider/model, budgets, retries, prices; the "
                   "GatewayConfig fields in agensh_ray/config.py); the flags below override it")
    p.add_argument("--rpm", type=float, default=None, help="gateway: requests per minute, the whole cluster, any model")
    p.add_argument("--tpm", type=float, default=None, help="gateway: tokens per minute, the whole cluster, any model")
    p.add_argument("--max-streams", type=int, default=None, help="gateway: model calls in flight at once, cluster-wide")
    p.add_argument("--budget-worker-usd", type=float, default=None, help="gateway: dollars per worker, then it stops")
    p.add_argument("--budget-worker-tokens", type=int, default=None, help="gateway: tokens per worker, then it stops")
    p.add_argument("--budget-run-usd", type=float, default=None, help="gateway: dollars for the run, then it winds down")
    p.add_argument("--budget-run-tokens", type=int, default=None, help="gateway: tokens for the run, then it winds down")
    p.add_argument("--prices", type=Path, default=None,
                   help="gateway: JSON prices in LiteLLM's format; its models win over LiteLLM's price map")
    p.add_argument("--no-sandbox", action="store_true",
                   help="turn off the bubblewrap sandbox that confines each worker's agent and its commands to its "
                   "workdir and HOME, with only its forge, tools and model reachable; without this flag a run "
                   "refuses to start where bubblewrap cannot sandbox (not installed, or no namespaces)")
    p.add_argument("--sandbox-read-only", type=Path, action="append", default=[], metavar="DIR",
                   help="an extra folder every sandbox sees read-only (repeatable)")
    p.add_argument("--think", type=float, default=20.0, help="sim: schedule seconds per step")
    p.add_argument("--bug-rate", type=float, default=0.25, help="sim: probability a first attempt fails its check")
    p.add_argument("--config", type=Path, default=None, metavar="FILE",
                   help="run with this RunConfig as JSON (a run folder's config.json, an experiment's "
                   "configs/<cell>.json; agensh_ray/config.py) instead of the flags above (only -v still applies)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    a = p.parse_args(argv)
    if a.resume is not None:
        return _resume(p, a)
    if a.config is not None:
        return _from_file(p, a)
    if (a.forge != "embedded" or a.chat != "embedded") and a.secrets is None:
        p.error(f"--forge {a.forge} --chat {a.chat} needs --secrets (from python -m agensh_ray.bootstrap)")
    if a.services_resource and not a.address:
        p.error("--services-resource names a resource of a cluster's nodes: it needs --address (a local Ray "
                "instance declares none)")
    global VERBOSE
    VERBOSE = a.verbose
    # `is not None`: a 0 must be refused (the types above), never read as "not given".
    minutes = a.hours * 60 if a.hours is not None else (a.minutes if a.minutes is not None else 240.0)
    time_scale = a.time_scale if a.time_scale is not None else (DEMO_TIME_SCALE if a.harness == "sim" else 1.0)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        model = get_harness(a.harness).choose_model(a.model)
        gateway = gateway_config(a)
        cfg = RunConfig(
            workers=a.workers if a.workers is not None else (1 if a.baseline else 8),
            baseline=a.baseline,
            baseline_idle_turns=a.baseline_idle_turns,
            task=a.task,
            harness=a.harness,
            model=model,
            minutes=minutes,
            time_scale=time_scale,
            run_dir=a.run_dir,
            run_id=a.run_id,
            overwrite=a.overwrite,
            seed=a.seed,
            forge=a.forge,
            chat=a.chat,
            workers_per_actor=a.workers_per_actor,
            launch_interval_s=a.launch_interval,
            stop_when_done=not a.no_stop_when_done,
            score_every_s=a.checkpoint_every * 60.0,
            address=a.address,
            queue=a.queue,
            services_resource=a.services_resource,
            ship_code=not a.no_ship_code,
            worker_memory_mb=a.worker_memory_mb,
            routing=RoutingConfig(policy=a.policy, routers=a.routers),
            claims=a.claims,
            sim=SimConfig(think_s=a.think, bug_rate=a.bug_rate),
            services=ServicesConfig(secrets=a.secrets.resolve() if a.secrets else None, gitea_url=a.gitea_url,
                                    mattermost_url=a.mattermost_url, intake_listen=a.intake_listen),
            gateway=gateway,
            sandbox=SandboxConfig(enabled=not a.no_sandbox, read_only=[d.resolve() for d in a.sandbox_read_only]),
        )
        # The run folder, before Ray starts (the default id, a timestamp, is checked by the driver).
        runfolder.check_target(cfg.run_dir, cfg.run_id, cfg.overwrite)
        return cfg
    except ValidationError as exc:
        p.error("; ".join(_flag(e["loc"]) + e["msg"].removeprefix("Value error, ") for e in exc.errors()))
    except (RunFolderError, HarnessError, OSError) as exc:
        p.error(str(exc))


def _from_file(p: argparse.ArgumentParser, a: argparse.Namespace) -> RunConfig:
    """--config: the whole RunConfig from a JSON file, checked as the flags are (exit 2 on any error)."""
    global VERBOSE
    VERBOSE = a.verbose
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = RunConfig.model_validate_json(a.config.read_text())
        if cfg.model is None:  # as with the flags: the model the harness will ask for, in config.json
            cfg = cfg.model_copy(update={"model": get_harness(cfg.harness).choose_model(None)})
        runfolder.check_target(cfg.run_dir, cfg.run_id, cfg.overwrite)
        return cfg
    except ValidationError as exc:
        p.error(f"{a.config}: " + "; ".join(_flag(e["loc"]) + e["msg"].removeprefix("Value error, ")
                                             for e in exc.errors()))
    except (RunFolderError, HarnessError, OSError) as exc:
        p.error(str(exc))


def refuse(reason: str) -> NoReturn:
    """A refusal that is not about the command line's syntax: the reason alone, exit 2 (as `_main`'s checks)."""
    print(f"error: {reason}", file=sys.stderr)
    raise SystemExit(2)


RESUME_FLAGS = ("resume", "run_dir", "address", "no_ship_code", "verbose")
"""What may come with --resume (the rest of the run's settings are in its config.json)."""


def _resume(p: argparse.ArgumentParser, a: argparse.Namespace) -> RunConfig:
    """--resume RUN_ID: the run's own config.json, with this command line's Ray address; the folder checked
    resumable (agensh_ray/driver/resume.py) before Ray starts. A refusal is its reason alone (exit 2): the
    usage text says nothing about a run that cannot be resumed."""
    global VERBOSE
    VERBOSE = a.verbose
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    defaults = vars(p.parse_args([]))
    given = {d for d, v in vars(a).items() if d not in RESUME_FLAGS and v != defaults.get(d)}
    flag = {}
    for act in p._actions:  # one flag per setting (--gateway and --no-gateway set the same one)
        if act.dest in given and act.option_strings:
            flag.setdefault(act.dest, act.option_strings[0])
    extra = sorted(flag.values())
    if extra:
        refuse(f"--resume goes on with the run's own settings (its config.json): drop {', '.join(extra)}")
    from agensh_ray import storage
    from agensh_ray.driver.resume import read_state

    try:
        parent = storage.staging_parent(str(a.run_dir)) if storage.is_uri(a.run_dir) else Path(a.run_dir)
        folder = runfolder.check_folder(parent, a.resume, overwrite=True)
        read_state(folder)
        cfg = RunConfig.model_validate_json((folder / "config.json").read_text())
    except ValidationError as exc:
        refuse(f"{folder / 'config.json'}: " + "; ".join(_flag(e["loc"]) + e["msg"] for e in exc.errors()))
    except (RunFolderError, OSError) as exc:
        refuse(str(exc))
    # the --run-dir given now (it holds the run; the one in config.json may be relative to another folder)
    return cfg.model_copy(update={"resume": True, "overwrite": False, "run_dir": a.run_dir, "run_id": a.resume,
                                  "address": a.address if a.address is not None else cfg.address,
                                  "ship_code": cfg.ship_code and not a.no_ship_code})


FLAGS = {"think_s": "--think", "bug_rate": "--bug-rate", "routers": "--routers", "launch_interval_s":
         "--launch-interval", "score_every_s": "--checkpoint-every", "worker_memory_mb": "--worker-memory-mb"}


def _flag(loc: tuple) -> str:
    """The command-line flag a config error is about ("" when the message names it already)."""
    return f"{FLAGS.get(loc[-1], '.'.join(map(str, loc)))}: " if loc else ""


def gateway_config(a: argparse.Namespace) -> GatewayConfig:
    """The gateway's settings: the --gateway-config file, then the flags."""
    cfg = GatewayConfig.model_validate_json(a.gateway_config.read_text()) if a.gateway_config else GatewayConfig()
    limit = {k: v for k, v in (("rpm", a.rpm), ("tpm", a.tpm), ("max_streams", a.max_streams)) if v is not None}
    if limit:
        cfg.limits["*"] = ModelLimit(**{**(cfg.limits["*"].model_dump() if "*" in cfg.limits else {}), **limit})
    budget = {k: v for k, v in (("worker_usd", a.budget_worker_usd), ("worker_tokens", a.budget_worker_tokens),
                                ("run_usd", a.budget_run_usd), ("run_tokens", a.budget_run_tokens)) if v is not None}
    cfg.budget = cfg.budget.model_copy(update=budget)
    if a.prices is not None:
        cfg.prices = a.prices.resolve()
    if a.gateway is not None:
        cfg.enabled = a.gateway
    return cfg


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C before the driver installs its handlers: nothing started yet
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    cfg = parse_args(argv)
    if shutil.which("git") is None:  # the forge and every worker's clone
        print("error: git is not installed (Debian package git): the forge and every worker use it", file=sys.stderr)
        return 2
    try:
        task = Task.load(cfg.task)
        task.check_available()  # e.g. programbench:<id> without Docker: fails here, in seconds
        task.check_for(cfg.harness)  # a folder missing part of the format; the sim on a task without an oracle
        if cfg.sandbox.enabled:
            sandbox.require()
    except (TaskError, SandboxUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from agensh_ray.driver import Run

    run = Run(cfg, task, verbose=VERBOSE)
    try:
        summary = run.execute()
    except RunFolderError as exc:  # e.g. a default (timestamp) id whose folder exists
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TaskError as exc:  # before Ray: the task's reference could not be built here (build.sh's reason)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (CapacityError, HarnessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except ForcedStop as stop:  # a second signal before the driver could handle it
        return 128 + stop.signum
    if run.interrupts.requested:  # SIGINT 130, SIGTERM 143: the shell's convention for death by a signal
        return run.interrupts.exit_code
    return 0 if summary is not None else 1


if __name__ == "__main__":
    sys.exit(main())
