"""The run trace's tables: one pydantic row model per table, and the Arrow schema of each
derived from it.

The models are the single documentation of the trace's columns: docs/trace.md and the table views
of analysis/views.sql are generated from them (tests fail when those drift), and every writer
(agensh_ray.trace.writer) types its Parquet files with the schemas below.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from agensh_ray.models import now_us

SCHEMA_VERSION = 7
"""1: first schema. 2: forge.verdict and the pr_changes table added (older files read with nulls there).
3: the llm_calls and test_results tables added (older runs have none); scores gains the checkpoint's schedule time, not_run, error_code and eval_json (ProgramBench scoring).
4: turns.model, the model the agent was told to use (older files read with null there).
5: lifecycle.node, the Ray node of the actor or host (older files read with null there).
6: scores gains runner_files, strict_pass_rate, strict_passed and strict_eval_json: what main ships that
changes the test runner and its score without them (older files read with null there).
7: the clock table added: how far the agents lag behind their schedule, and whether the run is machine-bound
(older runs have none: an empty view); tool_calls.life and usage.life, the worker's life of the turn (older
files read with null there)."""


class TraceRow(BaseModel):
    """Columns every table has."""

    model_config = ConfigDict(use_attribute_docstrings=True)  # field docstrings document the trace (docs/trace.md)

    identity: ClassVar[tuple[str, ...]] = ("event_id",)
    # The columns that identify a row: rows equal there are copies of one event (written twice, by
    # two writers or by a replay of a durable log), and the analysis views keep one of them. A row
    # with an empty event_id has no identity: every such row is kept. (docs/trace.md shows it.)
    ids: ClassVar[str] = ""
    # How the table's event_id is made and why it cannot repeat in a run (across gateways, nodes, actor
    # restarts and resumed drivers); docs/trace.md shows it.

    run_id: str = ""
    """The run this row belongs to (filled in by the writer)."""
    ts: int = Field(default_factory=now_us)
    """When it happened, UTC microseconds (stored as timestamp[us, UTC])."""
    worker_id: str | None = None
    """The worker concerned, if any."""
    event_id: str = ""
    """Idempotent id of the event this row records (e.g. board:17, chat:4)."""
    schema_version: int = SCHEMA_VERSION
    """Version of this trace schema."""


class BoardRow(TraceRow):
    """One row per board entry, written by the BoardActor once the entry is durable."""

    ids: ClassVar[str] = (
        "`board:<seq>`, the entry's sequence number in the board's durable log (board.jsonl). A restarted or "
        "resumed board replays its log and goes on from its last seq: a seq is never given twice, and a "
        "replayed entry has the id of its first row."
    )

    seq: int
    """Board sequence number."""
    type: str
    """OBSERVED | FACT | FAIL | CLAIM | PATCH_SUMMARY."""
    text: str
    """The entry's text (CLAIM <= 100 chars, PATCH_SUMMARY <= 300)."""
    has_detail: bool = False
    """Whether the entry carries a longer detail (read with board_unfold)."""


class MessageRow(TraceRow):
    """One row per chat message (DM or task-channel post), written by the chat actor."""

    ids: ClassVar[str] = (
        "`chat:<seq>`, the message's sequence number in the chat's durable log; a restarted or resumed chat "
        "goes on from its log's last seq, so an id never repeats."
    )

    seq: int
    """Chat sequence number."""
    kind: str
    """dm | channel."""
    sender: str
    """Worker who sent it."""
    recipient: str | None = None
    """The DM's recipient; null for channel posts."""
    text: str
    """The message text."""


class ForgeRow(TraceRow):
    """One row per forge event, in forge order; `worker_id` is the actor (pusher, reviewer, merger, ...)."""

    ids: ClassVar[str] = (
        "`forge:<seq>`, the event's sequence number in the forge's durable event log; a restarted or resumed "
        "forge goes on from its log's last seq, so an id never repeats."
    )

    seq: int
    """Forge event sequence number."""
    kind: str
    """push | pr_opened | pr_reviewed | pr_commented | pr_merged | pr_closed | merge_conflict | merge_failed |
    push_rejected (a refused push: `detail` says why)."""
    pr: int | None = None
    """The pull request concerned; null for pushes to a branch with no PR."""
    pr_author: str | None = None
    """Who opened that PR, as the forge actor knew it when writing the row (null when its lookup failed): a
    copy for convenience; the analysis takes a PR's author from whoever opened it (view `prs`)."""
    ref: str | None = None
    """Branch (or full ref for pushes) concerned."""
    detail: str = ""
    """Human-readable detail: PR title, review verdict and body, comment, "conflicting files: a, b", ..."""
    verdict: str | None = None
    """pr_reviewed only: approve | comment | request_changes (schema 2; older rows: parse `detail`)."""


class TurnRow(TraceRow):
    """Two rows per agent turn (phase start and phase end), written by the worker's host."""

    ids: ClassVar[str] = (
        "`turn:<worker>:<life>:<turn>:<phase>`, where `<life>` is a random 48-bit id drawn when the worker is "
        "launched (a resumed driver or a restarted host launches it again: turn numbers start at 1 in each "
        "life, the life id differs, so an id never repeats). Files older than this rule have an empty "
        "event_id: every row is kept, and the analysis finds a turn's life from the worker's `started` "
        "lifecycle rows (view worker_busy, analysis/views.sql)."
    )

    turn: int
    """Turn number within the worker's life (1-based)."""
    phase: str
    """start | end."""
    trigger: str = ""
    """What started the turn: first | events | nudge | share_findings | wind_down | handoff."""
    stop_reason: str | None = None
    """ACP stop reason on end (end_turn, max_tokens, cancelled, refusal, ...), or ours: error, agent_died,
    turn_deadline (the turn passed its deadline and its agent was killed)."""
    duration_ms: float | None = None
    """Turn length (end rows only)."""
    model: str | None = None
    """The model the agent was told to use (--model, the harness's model variable or its default); null for the sim
    and cmd: agents, and in files older than schema 4."""


class ToolCallRow(TraceRow):
    """One row per tool call: our infra tools (MCP) and the agent's own tools (as the agent reports them)."""

    ids: ClassVar[str] = (
        "Empty: every row is kept (no writer writes a tool call twice). `turn` is the turn number within the "
        "worker's life `life`: (worker_id, life, turn) is the turn of turns.event_id `turn:<worker>:<life>:<turn>:...`."
    )

    tool: str
    """Tool name (infra tools over MCP) or the agent's own tool title."""
    source: str
    """mcp: one of our infra tools; agent: reported by the agent over ACP session/update."""
    tool_call_id: str = ""
    """The agent's id for the call (agent source), or "" ."""
    duration_ms: float | None = None
    """How long the call took, if known."""
    ok: bool = True
    """False if the call failed."""
    error: str | None = None
    """The error, if it failed."""
    turn: int | None = None
    """The worker's turn during which it ran (numbered within the worker's life)."""
    life: str | None = None
    """The worker's life the turn is in (the `<life>` of turns.event_id); null in files older than schema 7."""


class UsageRow(TraceRow):
    """Token usage as the agent reports it (the sim agent reports none, so sim runs leave this table empty)."""

    ids: ClassVar[str] = (
        "Empty for agent-reported usage: every row is kept (no writer writes one twice). (worker_id, life, turn) "
        "is the turn it belongs to, as in tool_calls."
    )

    turn: int
    """The worker's turn it belongs to (numbered within the worker's life)."""
    life: str | None = None
    """The worker's life the turn is in (the `<life>` of turns.event_id); null in files older than schema 7."""
    input_tokens: int = 0
    """Input (prompt) tokens."""
    output_tokens: int = 0
    """Output (completion) tokens."""
    cost_usd: float = 0.0
    """Cost the agent reported, 0 if it reports none (analysis prices tokens with analysis/prices.csv)."""


class DeliveryRow(TraceRow):
    """One row per event delivered to a worker (the worker_id): board entries, DMs, nudges, ..."""

    ids: ClassVar[str] = (
        "The delivered event's own id (`board:<seq>`, `chat:<seq>`, `forge:<seq>`: unique, see those tables) "
        "with the worker; a host's own prompt is `<kind>:<worker>:<ts in us>`. A resumed run's routers start "
        "at the sources' heads, so no event is delivered twice to one worker."
    )

    identity: ClassVar[tuple[str, ...]] = ("event_id", "worker_id")  # one event reaches many workers

    kind: str
    """board | dm | channel | forge | nudge | share_findings | wind_down | summary | overlap (a claim or PR on a key
    another worker holds, pushed to both: agensh_ray/routing/fanout.py)."""
    priority: str
    """high (mid-turn) | low (next turn start)."""
    via: str
    """mid_turn (appended to a tool result) | turn_start (in the next prompt)."""
    enqueue_ts: int
    """When the router queued it (UTC microseconds)."""
    latency_ms: float
    """Delivery time minus enqueue time."""


class ScoreRow(TraceRow):
    """One row per checkpoint: main scored against the hidden tests by ProgramBench's rules, written by
    the driver (agensh_ray/task/checkpoint.py)."""

    ids: ClassVar[str] = (
        "`checkpoint:<n>`, the checkpoint's number in the run: a resumed driver counts on from the "
        "checkpoints already in the run folder (driver/resume.py), so an id never repeats."
    )

    checkpoint: str
    """periodic | final."""
    commit: str = ""
    """The main commit that was scored."""
    passed: int
    """Active hidden tests passed."""
    total: int
    """Active hidden tests (ignored branches and tests left out): the score's denominator."""
    pass_rate: float
    """The official per-instance score, passed / total (programbench.submission.score_instance)."""
    schedule_s: float | None = None
    """Schedule seconds since the run started when main was taken (the x of a time-to-score curve)."""
    not_run: int | None = None
    """Active tests that did not run (a failed build or branch, missing from the JUnit XML); they count as failed."""
    error_code: str | None = None
    """Why the evaluation as a whole failed (e.g. compile_failed), else null."""
    eval_json: str | None = None
    """The checkpoint's EvaluationResult (ProgramBench's eval.json), relative to the run folder."""
    runner_files: str | None = None
    """What main (after its build) holds that changes the hidden tests' runner, comma-separated: a `conftest.py`
    pytest loads, pytest settings, a module shadowing one pytest imports, files in the tests' folder, ...
    (agensh_ray/task/runner_files.py). Empty: none, and strict_pass_rate is pass_rate."""
    strict_pass_rate: float | None = None
    """The score without those files (the same evaluation with them removed after the build): what the team's
    program earned. pass_rate, the official score, counts them; the two differ when the runner files changed
    the outcome. Null when unknown (older traces)."""
    strict_passed: int | None = None
    """Active hidden tests passed in the strict evaluation."""
    strict_eval_json: str | None = None
    """The strict evaluation's EvaluationResult, relative to the run folder (null when runner_files is empty:
    none was run)."""


class TestResultRow(TraceRow):
    """One row per hidden test per checkpoint (every test of the active branches, ignored ones flagged)."""

    ids: ClassVar[str] = (
        "The `checkpoint:<n>` of its scores row, with the branch and test (one row per test per checkpoint)."
    )

    __test__ = False  # not a pytest test class
    identity: ClassVar[tuple[str, ...]] = ("event_id", "branch", "test")  # a checkpoint's rows share its event_id
    checkpoint: str
    """periodic | final (the scores row of the same event_id)."""
    commit: str = ""
    """The main commit that was scored."""
    branch: str
    """The test branch (tests.json)."""
    test: str
    """The test's name as ProgramBench's JUnit parsing gives it."""
    status: str
    """passed | skipped | failure | error | system_error | not_run."""
    ignored: bool = False
    """The test is ignored by tests.json (e.g. dummy_pass) and does not count."""


MODEL_ERROR = "model error: "
"""How a `turn_error` row's detail starts when the turn failed on its model (its calls failed through the gateway,
or the agent answered the turn with an error): summary.json counts these as model errors."""


class LifecycleRow(TraceRow):
    """One row per change in a worker's life (its agent process started, stopped, crashed, ...)."""

    ids: ClassVar[str] = (
        "Empty for worker and actor rows (every row is kept: none is written twice). Checkpoint rows: "
        "`checkpoint_missed:<slot>` (the slot's number on the run's checkpoint grid, counted from the "
        "schedule's start, which a resumed driver keeps) and `checkpoint_failed:<driver life>:<n>` (a random "
        "48-bit id per driver: a resumed driver counts its failures from 1 again)."
    )

    event: str
    """started | stopped | crashed | restarted | gave_up | turn_error (the turn failed: the agent's error, or
    its model calls failed through the gateway, with the provider's status; a turn that failed on its model has a
    detail starting "model error: ") | refused (a request of the agent
    the permission policy refused; the detail says what and why) | resumed (its host or the driver was restarted: the
    worker goes on from its clone with a hand-off) | limit_reached (a resource limit of its sandbox was enforced:
    memory, processes or disk, with what it was; agensh_ray/agent/limits.py; an agent the memory limit killed is a
    `crashed` row starting "agent killed: memory limit ...") | turn_deadline (its turn passed its deadline,
    `liveness.turn_deadline_min`, or its agent was stopped, SIGSTOP, for `liveness.agent_stopped_s`: the agent's
    process group was killed, the detail says which; a `restarted` row follows, the worker goes on with a
    hand-off). Rows of the run's actors (worker_id null, written by the driver): actor_died | actor_hung (no
    heartbeat, or its event loop stuck, for `liveness.heartbeat_s`; the detail says how long) | actor_killed (hung
    for `liveness.hung_kill_s`: killed so Ray restarts it; actor_restarted follows) | actor_kill_failed |
    actor_restarted (back, in a new process) | actor_lost (dead for good) |
    actor_answering (away, then answering from the same process) | actor_resumed (a restarted host started
    again and its workers launched) | actor_placed (where Ray first put it). Rows of the checkpoints (host
    "checkpoints", written by the driver, agensh_ray/task/checkpoint.py): checkpoint_missed (a periodic checkpoint
    that could not start before the next one's time or the final one; the detail says which and why) |
    checkpoint_failed (a checkpoint that raised, e.g. the forge unreachable; the run went on; the detail has the
    error)."""
    detail: str = ""
    """Why, or the harness used."""
    host: str = ""
    """The host (WorkerActor) running it; for an actor_* row, the actor ("board", "forge", "router r0",
    "host h001", ...)."""
    pid: int | None = None
    """The agent process id; for an actor_* row, the actor's process id (the old one when it died, the new
    one when it came back)."""
    node: str = ""
    """The Ray node id (hex) the host or actor runs on: for actor_died / actor_lost the node it ran on, for
    actor_placed / actor_restarted / actor_resumed the node it is on now; empty where unknown (a host run
    without Ray)."""


class LlmCallRow(TraceRow):
    """One row per model call an agent made through the model gateway (`worker_id`: whose virtual key it
    carried), written by the gateway of the agent's node when the call ends, however it ends. The tokens
    are the provider's own count (its usage fields, streams included); the cost prices them by the model
    that answered (LiteLLM's price map, or the run's override file)."""

    identity: ClassVar[tuple[str, ...]] = ("event_id", "ts")  # old files' ids repeated across a resume

    ids: ClassVar[str] = (
        "`<gateway>:<life>:<n>`: the gateway's name (its node id's first 16 characters), a random 48-bit id "
        "drawn when that gateway starts, and its call counter. A gateway started again on the same node (a "
        "resumed driver, a restarted actor) draws a new life, so an id never repeats. Files older than this "
        "rule have `<gateway>:<n>`, which a resumed driver repeated: the identity includes `ts` (a copy of "
        "one call has its ts; two calls never share both), so their calls are all kept."
    )

    gateway: str
    """The gateway that carried it (the node's)."""
    provider: str
    """openai | anthropic | gemini (the gateway route)."""
    api: str
    """chat (OpenAI chat completions) | responses (OpenAI responses) | messages (Anthropic) | generate (Gemini)."""
    model: str
    """The model asked for."""
    model_used: str | None = None
    """The model the provider says answered (priced by this one when known)."""
    stream: bool = False
    """Whether the answer was streamed."""
    status: str
    """ok (the agent received the whole answer by its provider's protocol: a body, or a stream up to its last
    content event; it may hang up before the usage chunk or the end marker) | error (the provider refused it: 4xx,
    or an error inside the stream) | gave_up (retries exhausted) | cut (the stream broke after bytes reached the
    agent) | refused (a budget cap; or, after a give-up, every further call of that worker's turn, at once) |
    client_gone (the agent hung up before its answer was whole)."""
    http_status: int | None = None
    """The HTTP status the agent got (null if it hung up before any)."""
    input_tokens: int = 0
    """Input tokens, cache reads and writes included (the provider's count)."""
    cached_tokens: int = 0
    """Input tokens read from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache (Anthropic)."""
    output_tokens: int = 0
    """Output tokens, reasoning included."""
    cost_usd: float | None = None
    """What the call cost; null (unknown, never counted as $0) when no price table knows the model, or when the
    provider's answer reported no usage."""
    latency_ms: float
    """From the call's arrival at the gateway to its last byte (queueing and retries included)."""
    ttfb_ms: float | None = None
    """From arrival to the first byte passed to the agent."""
    queued_ms: float = 0.0
    """Time spent waiting for room under the limits (every attempt)."""
    retries: int = 0
    """Attempts after the first."""
    retry_statuses: str = ""
    """The provider's answers that were retried, in order (e.g. "429,429,500"; "conn" for no answer)."""
    error: str | None = None
    """The last error: the provider's status and message, or the refusal."""


class PrChangeRow(TraceRow):
    """The lines a PR changes, snapshotted by the forge actor when the PR is opened, merged or closed.

    One row per change block of the PR's diff (a run of removed and/or added lines, without
    context, as `git diff -U0` would show it); a file changed with no text hunk (binary, mode or
    rename only) gets one row with null line numbers. `worker_id` is the actor of the snapshot event.
    """

    ids: ClassVar[str] = (
        "The `forge:<seq>` of the forge event that took the snapshot, with the change block."
    )

    identity: ClassVar[tuple[str, ...]] = (  # a snapshot's rows share the event_id of its forge event
        "event_id", "path", "status", "old_start", "old_lines", "new_start", "new_lines", "function")

    pr: int
    """The pull request."""
    pr_author: str | None = None
    """Who opened it."""
    snapshot: str
    """The forge event that took the snapshot: pr_opened | pr_merged | pr_closed (event_id is that event's)."""
    path: str
    """File path (after the change; the old path for a deletion)."""
    status: str
    """What happened to the file: added | modified | deleted | renamed."""
    old_start: int | None = None
    """First old-side line the block removes; for a pure insertion, the old line it follows (0 = top)."""
    old_lines: int | None = None
    """Old-side lines removed (0 = pure insertion)."""
    new_start: int | None = None
    """First new-side line the block adds; for a pure deletion, the new line it follows."""
    new_lines: int | None = None
    """New-side lines added (0 = pure deletion)."""
    function: str = ""
    """The hunk's section heading from git (the enclosing function or class, by git's funcname rules), or ""."""


class IntakeRow(TraceRow):
    """A webhook the router intake refused (bad or missing signature, body too large); nothing else is done
    with it. Written by the forge actor, which hosts the intake (services/forge/gitea/intake.py)."""

    ids: ClassVar[str] = (
        "`intake:<delivery id>` (`intake:-` without one), with the time and the sender: a refused request is "
        "never written twice."
    )

    identity: ClassVar[tuple[str, ...]] = ("event_id", "ts", "source")  # a request without a delivery id: intake:-

    source: str
    """The sender's address."""
    reason: str
    """Why it was refused."""
    delivery: str | None = None
    """The X-Gitea-Delivery id the request claimed, if any."""


class ClockRow(TraceRow):
    """The clock that measures the organization, not the machine (agensh_ray/lag.py): written by the driver at each
    progress tick (scope `window`: the last 30 wall seconds) and once at the end (scope `run`: the whole run), from
    the hosts' counters. Null where unknown (too few tool calls, no schedstat)."""

    scope: str
    """window (the last `window_s` wall seconds, at each progress tick) | run (the whole run, once at its end)."""
    window_s: float
    """Wall seconds the figures cover."""
    time_scale: float
    """The run's time scale (schedule seconds per wall second)."""
    agent_tool_median_ms: float | None = None
    """Median wall ms of an MCP tool call as the agent waited for it (its start and end reported over ACP), within
    2.2% (log-bucket histograms)."""
    server_tool_median_ms: float | None = None
    """Median wall ms of an MCP tool call as the tool server served it, within 2.2%."""
    tool_latency_ratio: float | None = None
    """agent_tool_median_ms / server_tool_median_ms."""
    cpu_wait_share: float | None = None
    """Share of the time the run's hosts and agents (their process trees) were ready to run that they spent
    waiting for a CPU (the kernel's schedstat: run-queue wait / (run + wait))."""
    machine_bound: bool | None = None
    """True when the machine could not keep up: ratio > 2 with >= 1 schedule s of lag per call, or CPU wait share >
    0.5; False when both are known and under; null when not known."""
    why: str = ""
    """The rule's reasons in words."""


TABLES: dict[str, type[TraceRow]] = {
    "board": BoardRow,
    "messages": MessageRow,
    "forge": ForgeRow,
    "turns": TurnRow,
    "tool_calls": ToolCallRow,
    "usage": UsageRow,
    "deliveries": DeliveryRow,
    "scores": ScoreRow,
    "test_results": TestResultRow,
    "lifecycle": LifecycleRow,
    "llm_calls": LlmCallRow,
    "pr_changes": PrChangeRow,
    "intake": IntakeRow,
    "clock": ClockRow,
}

_ARROW = {int: pa.int64(), str: pa.string(), float: pa.float64(), bool: pa.bool_()}
_TS_COLUMNS = {"ts", "enqueue_ts"}


def arrow_schema(model: type[TraceRow]) -> pa.Schema:
    """The Parquet schema of a table, derived from its row model."""
    fields = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        nullable = False
        if isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union:
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            nullable = True
            ann = args[0]
        typ = pa.timestamp("us", tz="UTC") if name in _TS_COLUMNS else _ARROW[ann]
        fields.append(pa.field(name, typ, nullable=nullable))
    return pa.schema(fields)


SCHEMAS = {table: arrow_schema(model) for table, model in TABLES.items()}


def write_schema_files(run_dir: str | Path) -> None:
    """An empty `trace/<table>/_schema.parquet` per table: the DuckDB CLI's views
    (analysis/views.sql) need at least one file per table, and a run may never write
    some tables (the sim reports no usage). Call once when the run starts."""
    for table, schema in SCHEMAS.items():
        folder = Path(run_dir) / "trace" / table
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "_schema.parquet").exists():
            pq.write_table(schema.empty_table(), folder / ".schema.tmp")
            (folder / ".schema.tmp").rename(folder / "_schema.parquet")
