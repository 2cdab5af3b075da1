"""Run configuration: one pydantic model per component, a docstring per field.

Every schedule constant is a setting here; ``time_scale`` compresses them all
(a time_scale of 60 runs one hour of schedule in one minute of wall time).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A run id is one folder name under --run-dir: no path separators, no '..', no leading dot or dash."""


def check_run_id(run_id: str) -> None:
    """ValueError unless `run_id` names one folder inside --run-dir."""
    if not RUN_ID_RE.fullmatch(run_id) or ".." in run_id:
        raise ValueError(f"run id {run_id!r} must be one folder name: letters, digits, '.', '_' and '-' "
                         "(not first), no '..', at most 128 characters")


def worker_ids(n: int) -> list[str]:
    """The ids of a run's `n` workers, w001 to wNNN (three digits at least, four from 1,000 workers): the
    driver launches them, the provisioning makes a Gitea/Mattermost user of each."""
    width = max(3, len(str(n)))
    return [f"w{i:0{width}d}" for i in range(1, n + 1)]


BOARD_TOOLS = frozenset({"board_read", "board_grep", "board_unfold", "board_write", "board_claims"})
"""The board's tools (agensh_ray/tools.py), withheld when `RunConfig.board_tools` is off."""
CHAT_TOOLS = frozenset({"send_dm", "channel_post", "read_messages"})
"""The chat's tools, withheld when `RunConfig.chat_tools` is off."""


class RoutingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: Literal["all", "relevant"] = "all"
    """all: every new board entry goes to every worker mid-turn (the paper's);
    relevant: only entries overlapping the worker's active claims, the rest summarised at turn start."""
    routers: int = Field(2, ge=1)
    """Number of RouterActors (at least 1); each serves a slice of the WorkerActors."""
    idle_nudge_s: float = Field(600.0, gt=0)
    """Send a 'keep working' nudge after this long without a turn (schedule seconds)."""
    nudge: bool = True
    """Send the idle nudge at all (off: an idle worker waits for a DM, a forge event or a wind-down notice)."""
    share_findings: bool = True
    """After a turn that wrote nothing to the board, prompt the worker to share findings (never without the
    board tools)."""
    wind_down_s: list[float] = Field(default_factory=lambda: [2700.0, 300.0])
    """Wind-down notices this many schedule seconds before the deadline (T-45 min, T-5 min)."""
    poll_timeout_s: float = 1.0
    """Long-poll timeout of a router waiting on a source (wall seconds)."""
    linger_s: float = 0.15
    """A router reads a source at most once per this many wall seconds and ships what it read to its
    WorkerActors at once, so one read and one call per host carry a whole burst. A Ray call costs
    ~1 ms of CPU on each side, far more than the events it carries; at 1,024 workers on 16 hosts
    (bench/board_router.py, load x10) 0.05 s took 1.8 of the 2 cores, 0.15 s 1.45, with fan-out
    p99 ~200 ms."""
    ship_interval_s: float = 0.0
    """Extra minimum interval between two delivery calls to one WorkerActor (0: a host gets the next
    call as soon as its previous one returned; `linger_s` already paces them)."""


class SimConfig(BaseModel):
    """Knobs of the built-in simulated agent (stands in for an LLM-driven CLI; what it models and what it
    does not: agensh_ray/sim/settings.py)."""

    model_config = ConfigDict(extra="forbid")

    think_s: float = Field(20.0, ge=0)
    """Median schedule seconds of one step (a model call and the tool calls it makes): each step's time is drawn
    from a lognormal with this median (an LLM agent's: 30-60; the demo's: 20), cut at 10x the median."""
    think_sigma: float = Field(0.5, ge=0, le=3)
    """Spread of a step's time: the sigma of its logarithm (0: every step takes `think_s`; 0.5: a tenth of the
    steps take over 1.9x the median; 1.0: over 3.6x)."""
    lines_per_step: int = Field(10, ge=1)
    """Lines of a sized feature (generated tasks) one step writes: s lines take ceil(s / lines_per_step) steps."""
    bug_rate: float = Field(0.25, ge=0, le=1)
    """Probability that a first implementation fails its check (a FAIL entry, then a fix)."""
    observe_rate: float = 0.3
    """Probability of posting an OBSERVED entry while studying a feature."""
    verify_main_rate: float = 1.0
    """Probability that a worker with nothing left to claim checks main (when main changed since the newest
    check of it this worker made or saw reported) and reports what it found."""
    verify_sample: int = Field(4, ge=0)
    """Most features such a check runs: of the features touched since that newest check (every registered one
    when none), a seeded sample of this many when more (0: all of them)."""


class ServicesConfig(BaseModel):
    """Where the production services are (--forge gitea / --chat mattermost); unused when embedded."""

    model_config = ConfigDict(extra="forbid")

    secrets: Path | None = None
    """The secrets file `python -m agensh_ray.bootstrap` wrote (tokens; read by the forge and chat actors)."""
    gitea_url: str | None = None
    """Gitea base URL as this run reaches it (default: the one in the secrets file)."""
    mattermost_url: str | None = None
    """Mattermost base URL as this run reaches it (default: the one in the secrets file)."""
    intake_listen: str | None = None
    """host:port the webhook intake listens on (default: 0.0.0.0 and the port of the bootstrap's --intake-url)."""


class ModelLimit(BaseModel):
    """Cluster-wide limits of one provider/model, as the provider gives them (every node's gateway gets a
    share, by demand); None: no limit of that kind."""

    model_config = ConfigDict(extra="forbid")

    rpm: float | None = None
    """Requests per minute."""
    tpm: float | None = None
    """Tokens (input + output) per minute."""
    max_streams: int | None = None
    """Calls in flight at once (streaming or not)."""


class BudgetConfig(BaseModel):
    """Spending caps; None: no cap. A worker at its cap is stopped (its claims released) and the run goes on;
    at the run's cap the run winds down as at its deadline. Caps are checked before each call: the call that
    crosses one completes."""

    model_config = ConfigDict(extra="forbid")

    worker_usd: float | None = None
    """Dollars per worker."""
    worker_tokens: int | None = None
    """Tokens (input + output) per worker."""
    run_usd: float | None = None
    """Dollars for the whole run."""
    run_tokens: int | None = None
    """Tokens for the whole run."""


class RetryConfig(BaseModel):
    """How the gateway retries a provider's 429/5xx (agensh_ray/services/gateway/retry.py)."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = 8
    """Attempts per call before giving up (the agent then gets the provider's last answer). A 429 saying the
    provider's rate limit is used up is pacing and does not count; give_up_s bounds those."""
    give_up_s: float = 600.0
    """Give up when the next wait would pass this many seconds since the call arrived."""
    base_s: float = 1.0
    """First backoff without a Retry-After (doubles each attempt, full jitter)."""
    max_wait_s: float = 60.0
    """Longest single wait, Retry-After included."""
    jitter: float = 0.3
    """A Retry-After wait is stretched by up to this fraction, at random."""


class GatewayConfig(BaseModel):
    """The model gateway between every agent and its provider (docs/real-agents.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    """None: on for a real harness whose provider endpoint or key is configured; off for sim."""
    limits: dict[str, ModelLimit] = Field(default_factory=dict)
    """Limits by "provider/model", "provider/*" or "*" (the most specific key applies)."""
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    prices: Path | None = None
    """A JSON file of prices in LiteLLM's format; its models win over LiteLLM's map."""
    burst_s: float = 1.0
    """Requests and tokens a gateway may send at once, in seconds of its rate."""
    sync_interval_s: float = 1.0
    """How often each node's gateway reports demand and spending and gets its share (wall seconds)."""
    failure_backoff_s: float = 60.0
    """A worker whose turn's model calls failed waits this long before its next turn, doubling per failed
    turn in a row (schedule seconds)."""
    failure_backoff_max_s: float = 1800.0
    """The longest such wait (schedule seconds)."""
    give_up_grace_s: float = Field(10.0, gt=0)
    """After the gateway gave up on a turn's model call (its further calls refused at once), the agent has this
    long to end the turn itself, then it is cancelled, and as long again before the agent is stopped (wall
    seconds; agensh_ray/worker/give_up.py)."""
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0
    """Longest silence of a provider's answer before the call counts as failed."""


class LimitsConfig(BaseModel):
    """Each sandboxed agent's resources (agensh_ray/agent/limits.py says how each is enforced); 0: no limit of
    that kind. A host's shared sim process gets `memory_mib` and `pids` times the workers it serves."""

    model_config = ConfigDict(extra="forbid")

    memory_mib: int = Field(2048, ge=0)
    """Memory of the whole sandbox (the agent, its commands, its /tmp's pages). Past it the kernel kills a process
    of that sandbox only (the agent itself, if it is the largest: the host restarts it with a hand-off). A real
    CLI needs ~300 MiB; the rest is for what it runs (builds, tests)."""
    pids: int = Field(512, ge=0)
    """Processes and threads in the sandbox at once (a fork past it fails: EAGAIN)."""
    cpu_weight: int = Field(100, ge=0, le=10000)
    """Each sandbox's CPU share under contention, in cgroup v2 units (100: the default; v1 cpu.shares 1024)."""
    tmp_mib: int = Field(512, ge=0)
    """Size of the sandbox's private /tmp and of its /var/tmp (each; RAM, counted in `memory_mib`)."""
    disk_mib: int = Field(8192, ge=0)
    """The worker's workdir and HOME together; also the largest file any of its processes may write."""
    disk_check_s: float = Field(5.0, gt=0)
    """How often the host measures a worker's workdir and HOME at most (wall seconds; sooner near the limit)."""
    disk_max_entries: int = Field(1_000_000, ge=1)
    """The measuring walk stops after this many files and folders: more counts as over the limit."""
    cgroups: bool = True
    """Use cgroups where the machine has them (off: the rlimit fallback only)."""


class SandboxConfig(BaseModel):
    """The bubblewrap sandbox around each worker's agent process and every command it runs
    (agensh_ray/agent/sandbox.py; docs/real-agents.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Sandbox the workers (own mount, PID and network namespaces; only the workdir and HOME writable; only
    the forge, the MCP tools and the model reachable). A run refuses to start where bubblewrap cannot run,
    unless this is off (`--no-sandbox`)."""
    read_only: list[Path] = Field(default_factory=list)
    """Extra folders every sandbox sees read-only (a dataset, a toolchain outside /usr)."""
    limits: LimitsConfig | None = Field(default_factory=LimitsConfig)
    """Per-worker resource limits (None: none, as before issue 27)."""


class WriteRate(BaseModel):
    """One kind of write's limit, per worker: a token bucket of `burst` tokens refilled at `per_s`."""

    model_config = ConfigDict(extra="forbid")

    per_s: float = Field(gt=0)
    """Sustained writes per wall second."""
    burst: int = Field(ge=1)
    """Writes that may come at once after a quiet spell."""


class WriteRatesConfig(BaseModel):
    """Per-worker write rates on the board, the chat and the forge (agensh_ray/worker/rates.py): a worker
    writing faster than its rate waits for its turn at its own tool call, so a flooding worker slows itself,
    not the others. Per **wall** second, whatever `time_scale`: the limit protects the machine (the host's
    event loop, the board's group commit, the forge's git), whose capacity is counted in wall time.

    The defaults are far above what agents write: the sim at the demo's 120x wrote at most 3 board
    entries in a second and 6 in ten per worker, a model-driven agent a few a minute. A write that would
    wait more than `max_wait_s` (many calls at once) is refused after that wait, with a message that says
    the rate; a worker that keeps one call at a time waits at most 1/`per_s` and is never refused."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    board: WriteRate = Field(default_factory=lambda: WriteRate(per_s=5, burst=30))
    """`board_write`."""
    chat: WriteRate = Field(default_factory=lambda: WriteRate(per_s=2, burst=20))
    """`send_dm`, `channel_post`."""
    forge: WriteRate = Field(default_factory=lambda: WriteRate(per_s=1, burst=10))
    """`pr_create`, `pr_review`, `pr_comment`, `pr_merge` (each runs git or a state-log write on the forge)."""
    max_wait_s: float = Field(2.0, gt=0)
    """Longest a write waits for its turn (wall seconds); one that would wait longer is refused, after
    waiting this long (an immediate refusal would let a flooding agent call again at once)."""


class LivenessConfig(BaseModel):
    """Gray failures: actors that are alive but stuck, and agents whose turn never ends (docs/operations.md,
    "Liveness"). The actors' bounds are wall seconds (a hung process is a wall-time fact); the turn deadline is
    in schedule minutes, with a wall floor (as the claim's life has) so a slow machine does not cut normal
    turns."""

    model_config = ConfigDict(extra="forbid")

    heartbeat_s: float = Field(10.0, gt=0)
    """An actor whose heartbeat has gone unanswered this long (wall seconds), or whose event loop has not run for
    this long, is reported hung (`actor_hung` row, "away" on the progress line)."""
    hung_kill_s: float = Field(60.0, gt=0)
    """An actor hung this long (wall seconds) is killed and Ray restarts it, as after a death (`actor_killed`
    row); also the longest the driver's loop waits on one call to an actor."""
    turn_deadline_min: float = Field(30.0, gt=0)
    """A turn's deadline in schedule minutes: an agent still in its turn then (or stopped: SIGSTOP) is killed
    with its process group, and the worker goes on with a hand-off (`turn_deadline` row)."""
    agent_stopped_s: float = Field(60.0, gt=0)
    """An agent process stopped (SIGSTOP, a debugger) this long mid-turn (wall seconds) answers nothing: it is
    killed as at its turn's deadline, without waiting for it."""
    turn_floor_wall_s: float = Field(600.0, ge=0)
    """The turn deadline is never shorter than this many wall seconds, whatever the time scale (a sim turn's
    builds and tests take wall time that the time scale does not compress)."""

    @model_validator(mode="after")
    def _check(self) -> LivenessConfig:
        if self.hung_kill_s < self.heartbeat_s:
            raise ValueError(f"liveness.hung_kill_s ({self.hung_kill_s:g}) must be at least liveness.heartbeat_s "
                             f"({self.heartbeat_s:g}): an actor is reported hung before it is killed")
        return self


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workers: int = 8
    """Number of identical workers (1 to 1,024)."""
    task: str = "textkit"
    """A bundled task name (see tasks/) or a path to a task directory."""
    harness: str = "sim"
    """Agent CLI behind ACP: sim, copilot, claude, codex, gemini or cmd:<command line>."""
    model: str | None = None
    """The model every agent uses (--model; else the harness's model variable, else its default: Harness.choose_model;
    None for the sim and cmd: agents, which take none)."""
    minutes: float = 240.0
    """Run length in schedule minutes (the deadline)."""
    time_scale: float = 1.0
    """Schedule seconds per wall second; compresses every schedule constant."""
    run_dir: str | Path = Path("runs")
    """Parent folder of the run folders (runs/<run_id>/): a local path, or an object-store URI as a string
    (`s3://bucket/prefix`; agensh_ray/storage.py)."""

    @field_validator("run_dir")
    @classmethod
    def _run_dir(cls, v: str | Path) -> str | Path:
        """A URI stays a string (a Path would fold its `//`), anything else is a path."""
        return Path(v) if isinstance(v, str) and "://" not in v else v
    run_id: str | None = None
    """Run id; default: a timestamp. One folder name: letters, digits, '.', '_', '-' (no path separators,
    not '.' or '..'), at most 128 characters."""
    overwrite: bool = False
    """Reuse the run folder of an earlier run (one holding config.json) after removing its contents;
    without it such a folder is refused."""
    resume: bool = False
    """Go on with the run of this `run_id` whose driver died (`--resume`; agensh_ray/driver/resume.py): its
    folder, its config.json and its schedule. Set by the command line, never stored."""
    seed: int = 0
    """Seed of every random choice (the sim agent's included)."""
    forge: str = "embedded"
    """Forge implementation: embedded (or gitea)."""
    chat: str = "embedded"
    """Chat implementation: embedded (or mattermost)."""
    workers_per_actor: int = 1
    """Workers hosted by one WorkerActor (>1 only to simulate scale on a small machine)."""
    launch_interval_s: float = Field(30.0, ge=0)
    """Schedule seconds between worker launches during the first launch_fast_after_s."""
    launch_fast_after_s: float = 3600.0
    """After this many schedule seconds, launch every launch_fast_interval_s instead."""
    launch_fast_interval_s: float = 3.0
    """Launch interval after the first hour."""
    stop_when_done: bool = True
    """End early once every worker is idle with nothing left to do (the demo); off for real runs."""
    score_every_s: float = Field(1800.0, gt=0)
    """Schedule seconds between checkpoints (main scored by ProgramBench's rules); one more at the end."""
    address: str | None = None
    """Ray address (auto to join a cluster); None starts a local instance."""
    ship_code: bool = True
    """With an address: ship this checkout to every node (Ray runtime_env working_dir). Off when every
    node already has it at the same path (one machine, a shared mount): Ray nodes that share one host
    and session folder would unpack it into the same place at once."""
    services_resource: str | None = None
    """The Ray resource of the node type the board, chat, forge and routers run on (each asks for 0.001 of it), so
    Ray restarts them on another node of that type when theirs is lost; None: pinned to the driver's node (the
    head), whose loss ends the run anyway."""
    queue: bool = False
    """On a cluster with fewer free agent slots than workers, wait for slots instead of refusing."""
    worker_memory_mb: int | None = None
    """Memory Ray reserves per worker (default: 450 MiB for a real agent CLI, 0 for sim)."""
    board_tools: bool = True
    """Give the agents the board tools (board_read, board_grep, board_unfold, board_write). Off: an ablation
    (the board service still runs, empty; the share-findings prompt is not sent)."""
    chat_tools: bool = True
    """Give the agents the chat tools (send_dm, channel_post, read_messages). Off: an ablation."""
    claim_ttl_s: float = Field(3600.0, gt=0)
    """A claim's life without renewal, in schedule seconds: how long a CLAIM stays in the board's recent view
    (what `board_read` shows; older claims are found by `board_grep`) and, under `claims = "lease"`, how long
    an open claim lasts after its holder's latest activity (agensh_ray/board/leases.py)."""
    claims: Literal["lease", "legacy"] = "lease"
    """The claim rule (agensh_ray/board/leases.py), an ablation. `lease`: a claim lives claim_ttl_s schedule
    seconds but at least claim_floor_wall_s wall seconds, from its holder's latest board write or PR action;
    the agents get `board_claims` (the open claims on a key, oldest first, from the board's index); an
    overlapping claim or PR is pushed to both holders at once. `legacy` (the rule before issue 30): a claim
    lives claim_ttl_s / time_scale wall seconds from its entry, no renewal, no `board_claims`, no push."""
    claim_floor_wall_s: float = Field(600.0, gt=0)
    """Under `claims = "lease"`: a claim's shortest life in wall seconds, whatever the time scale (so it
    outlives a slow build on a loaded machine; see CLAIM_FLOOR_WALL_S in agensh_ray/board/leases.py)."""
    baseline: bool = False
    """The single-agent baseline (`--baseline`): one worker, no board or chat tools, no routers, its own
    prompt (prompts/baseline.md), and a stop hook: each time the agent ends its turn before the deadline it is
    told to keep going (prompts/keep_going.md), until the deadline or `baseline_idle_turns` turns in a row
    that did no work; then the run ends ("ended": "done")."""
    baseline_idle_turns: int = Field(3, ge=1)
    """Baseline: consecutive turns without work (no file edited, no commit, no change to the clone, no PR
    opened, reviewed, commented or merged) after which the agent is not told to keep going."""
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    sim: SimConfig = Field(default_factory=SimConfig)
    services: ServicesConfig = Field(default_factory=ServicesConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    write_rates: WriteRatesConfig = Field(default_factory=WriteRatesConfig)
    liveness: LivenessConfig = Field(default_factory=LivenessConfig)

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if not 1 <= self.workers <= 1024:
            raise ValueError(f"workers must be between 1 and 1,024, got {self.workers}")
        if self.time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {self.time_scale}")
        if self.minutes <= 0:
            raise ValueError(f"minutes must be positive, got {self.minutes}")
        if self.workers_per_actor < 1:
            raise ValueError("workers_per_actor must be at least 1")
        if self.run_id is not None:
            check_run_id(self.run_id)
        if self.baseline:
            if self.workers != 1:
                raise ValueError(f"the baseline runs one worker, got workers={self.workers}")
            if self.board_tools or self.chat_tools:  # the baseline has neither: set here, whatever was given
                object.__setattr__(self, "board_tools", False)
                object.__setattr__(self, "chat_tools", False)
        return self

    @property
    def tools_off(self) -> frozenset[str]:
        """The infra tools this run does not give its agents (agensh_ray/tools.py)."""
        off = (frozenset() if self.board_tools else BOARD_TOOLS) | (frozenset() if self.chat_tools else CHAT_TOOLS)
        return off | {"board_claims"} if self.claims == "legacy" else off

    @property
    def claim_life_wall_s(self) -> float:
        """A claim's life without renewal in wall seconds, by this run's rule (the board's, the analysis')."""
        from agensh_ray.board.leases import claim_life_wall_s
        return claim_life_wall_s(self.claim_ttl_s, self.time_scale, self.claims, self.claim_floor_wall_s)

    def wall(self, schedule_s: float) -> float:
        """Wall seconds for a span of schedule seconds."""
        return schedule_s / self.time_scale

    @property
    def turn_deadline_wall_s(self) -> float:
        """A turn's deadline in wall seconds: `liveness.turn_deadline_min` at this time scale, at least its floor."""
        return max(self.wall(self.liveness.turn_deadline_min * 60.0), self.liveness.turn_floor_wall_s)

    @property
    def deadline_wall_s(self) -> float:
        return self.wall(self.minutes * 60.0)
