"""One prompt turn of the sim agent: the five-step loop of prompts/worker.md
until nothing is left to claim.

gather (board, messages, main) -> claim (settle collisions by DM: the earlier
claim wins, the later one backs off) -> act (write the oracle's module, maybe
with its planted bug, through the client's fs/write_text_file) -> verify (the
task's visible checks; FAIL then fix) -> merge (PR; on conflict merge main,
resolve, push, retry) -> PATCH_SUMMARY. The board is read through the same
text the tools give a real agent (agensh_ray.render), parsed with the regexes
below.
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import TYPE_CHECKING

import acp

from agensh_ray.sim.steps import features_touched, verify_plan, write_steps

if TYPE_CHECKING:
    from agensh_ray.sim.agent import SimAgent, SimSession

WORKER_RE = re.compile(r"worker id:\s*(w\d+)", re.I)
CLAIM_RE = re.compile(r'^#(\d+) CLAIM (w\d+): "claim ([\w-]+)', re.M)
SUMMARY_RE = re.compile(r'^#\d+ PATCH_SUMMARY (w\d+): "([\w-]+):', re.M)
RELEASE_RE = re.compile(r'^#(\d+) FAIL (w\d+): "release ([\w-]+)', re.M)
"""An entry reads `#12 CLAIM w003: "claim tac: ..."` (agensh_ray.render.fmt_entry: the text quoted)."""
CONFLICT_RE = re.compile(r"conflicts with main in \d+ file\(s\): (.+?)\.\s", re.S)
PR_RE = re.compile(r"PR #(\d+)")
AWAY_RE = re.compile(r"temporarily unavailable|is restarting|did not answer", re.I)
"""A tool's answer while the forge restarts (its process or its node lost): the call may or may not have been
done; ask again (or look) rather than give the feature up and leave a PR open."""
MAX_ATTEMPTS = 2
"""Attempts at a feature whose build raised (a tool or git error, not a failing check) before it is left to peers."""
MAX_WAITS = 60
"""Steps a worker waits in one turn while every feature left is blocked on dependencies peers are building (a task
with a dependency graph); then it ends its turn (the host's nudge brings it back)."""
MAIN_CHECK_RE = re.compile(r"\bmain ([0-9a-f]{12}) (?:passes|fails)\b")
"""A check of main as the sim reports it (a FACT, a FAIL or a channel post): `main <12 hex digits> passes ...`."""


class Cancelled(Exception):
    """The client cancelled the turn (session/cancel)."""


class Turn:
    """One prompt turn of one session: the five-step loop until nothing is left."""

    def __init__(self, agent: SimAgent, s: SimSession):
        self.agent = agent
        self.s = s
        self.task = agent.task
        self.cfg = agent.settings
        self.rng = s.rng

    # -- plumbing ------------------------------------------------------------------
    async def say(self, text: str) -> None:
        await self.agent.conn.session_update(self.s.session_id, acp.update_agent_message_text(text + "\n"))

    async def think(self, kind: str) -> None:
        """One step of `kind` (steps.py): its time drawn from the worker's own stream, slept in wall seconds."""
        if self.s.cancelled:
            raise Cancelled()
        self.agent.steps += 1
        wall = self.cfg.wall_s(self.s.clock.take(kind))
        if wall > 0:
            await asyncio.sleep(wall)
        if self.s.cancelled:
            raise Cancelled()

    async def _report(self, title: str, kind: str, status: str, call_id: str) -> None:
        if status == "in_progress":
            upd = acp.start_tool_call(call_id, title, kind=kind, status="in_progress")
        else:
            upd = acp.update_tool_call(call_id, status=status)
        await self.agent.conn.session_update(self.s.session_id, upd)

    def _call_id(self) -> str:
        self.s.tool_seq += 1
        return f"sim-{self.s.tool_seq}"

    async def tool(self, name: str, **args) -> str:
        """Call one of the infra tools over MCP; reports the call over ACP like a real agent."""
        cid = self._call_id()
        await self._report(f"agensh/{name}", "other", "in_progress", cid)
        res = await self.s.mcp.call_tool(name, args)
        text = "".join(getattr(c, "text", "") for c in res.content)
        failed = res.is_error or text.startswith("ERROR:")
        await self._report(f"agensh/{name}", "other", "failed" if failed else "completed", cid)
        self.agent._note_events(self.s, text)
        return text

    @property
    def board(self) -> bool:
        """This run gives the agent the board tools (the baseline and the no-board ablation do not)."""
        return "board_read" in self.s.tools

    @property
    def keyed(self) -> bool:
        """The run finds claims by key (`board_claims`, claim rule `lease`)."""
        return "board_claims" in self.s.tools

    @property
    def chat(self) -> bool:
        return "send_dm" in self.s.tools

    async def note(self, type: str, text: str, detail: str | None = None) -> str:
        """A finding: a board entry when the agent has the board, else a line of its own output (what an agent
        with nowhere to share keeps to itself)."""
        if self.board:
            return await self.tool("board_write", type=type, text=text, **({"detail": detail} if detail else {}))
        await self.say(f"{type}: {text}")
        return ""

    async def sh(self, *argv: str, check: bool = True) -> tuple[int, str]:
        """Run a command in the workdir with the agent's own shell (as Copilot CLI does)."""
        cid = self._call_id()
        await self._report(" ".join(argv)[:120], "execute", "in_progress", cid)
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=str(self.s.cwd), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env=self.s.env,
        )
        out, _ = await proc.communicate()
        text = out.decode("utf-8", "replace")
        ok = proc.returncode == 0
        await self._report(" ".join(argv)[:120], "execute", "completed" if ok else "failed", cid)
        if check and not ok:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {text[-800:]}")
        return proc.returncode, text

    async def write(self, rel: str, content: str) -> None:
        """Edit a file through the client's fs/write_text_file (as Claude Code does)."""
        cid = self._call_id()
        await self._report(f"write {rel}", "edit", "in_progress", cid)
        await self.agent.conn.write_text_file(content=content, path=str(self.s.cwd / rel), session_id=self.s.session_id)
        await self._report(f"write {rel}", "edit", "completed", cid)

    async def read(self, rel: str) -> str:
        resp = await self.agent.conn.read_text_file(path=str(self.s.cwd / rel), session_id=self.s.session_id)
        return resp.content

    # -- the loop --------------------------------------------------------------------
    async def run(self) -> None:
        self.s.waits = 0
        await self.think("wake")  # reading the prompt: the board's news, the DMs, the nudge
        while self.s.handed_prs:  # a hand-off listed PRs of its own still open: merge them first
            await self.finish_pr(*self.s.handed_prs.pop(0))
        woke = True
        while True:
            feature = await self.gather_and_claim(stepped=woke)
            woke = False
            if feature is None:
                await self.say("Nothing left to claim: every feature is merged or claimed by a peer.")
                if self.rng.random() < self.cfg.config.verify_main_rate:
                    await self.check_main()
                return
            try:
                await self.build(feature)
            except (Cancelled, asyncio.CancelledError):
                raise
            except Exception as exc:  # a failed step releases the claim instead of ending the turn
                self.s.failed[feature] = self.s.failed.get(feature, 0) + 1
                if self.s.failed[feature] >= MAX_ATTEMPTS:  # else tried again once it is free (a transient
                    self.s.lost.add(feature)                 # failure: the forge restarting, a lost push)
                await self.note(type="FAIL", text=f"release {feature}: {type(exc).__name__}"[:100],
                                detail=str(exc)[:4000])

    async def finish_pr(self, number: int, branch: str) -> None:
        """Merge a PR a previous session of this worker opened and did not merge (it died in between): left
        open, it would hold the run's end ("done" needs no PR open). Its feature may be on main by now (its
        claim was released when the session died): the merge then keeps main's version."""
        feature = branch.split("/", 1)[1]
        on_main = feature in await self.fetch_main()
        rc, _ = await self.sh("git", "checkout", "-q", "-B", branch, f"origin/{branch}", check=False)
        if rc != 0:
            await self.note(type="FAIL", text=f"PR #{number}: its branch {branch} is gone")
            return
        await self.say(f"Finishing PR #{number} ({branch}), left open by my previous session.")
        if await self.merge(number, branch, feature) and not on_main:
            self.s.mine.add(feature)
            await self.note(type="PATCH_SUMMARY",
                text=f"{feature}: added {self._label(feature)} and its registry line; PR #{number} merged",
            )

    def _merged_on_main(self, registry_text: str) -> set[str]:
        lines = {line.strip() for line in registry_text.splitlines()}
        return {f.name for f in self.task.features() if f.registry_line.strip() in lines}

    def _deps(self) -> dict[str, list[str]]:
        """Feature -> the features it depends on (empty for a task without a dependency graph)."""
        return {f.name: f.deps for f in self.task.features() if f.deps}

    def _label(self, feature: str) -> str:
        f = next(x for x in self.task.features() if x.name == feature)
        return f.module if f.size is not None else f"textkit/commands/{feature}.py"

    async def _wait_for_deps(self, blocked: list[str]) -> bool:
        """Every feature left is blocked on dependencies not merged yet: wait (True: the caller gathers again
        after a step), or, after MAX_WAITS in this turn, give up the turn (False)."""
        self.s.waits += 1
        if self.s.waits > MAX_WAITS:
            await self.say(f"Still waiting for dependencies of {len(blocked)} feature(s); ending my turn.")
            return False
        if self.s.waits == 1:
            await self.say(f"Every free feature waits for dependencies not merged yet ({len(blocked)}: "
                           f"{', '.join(blocked[:5])}{', ...' if len(blocked) > 5 else ''}); waiting for peers.")
        return True

    async def fetch_main(self) -> set[str]:
        """Fetch and return the features already registered on main."""
        await self.sh("git", "fetch", "-q", "origin")
        return await self.registered_on_main()

    async def registered_on_main(self) -> set[str]:
        """The features registered on origin/main as last fetched."""
        paths = self.task.registry_paths or [self.task.registry_path]
        _, registry = await self.sh("git", "show", *(f"origin/main:{p}" for p in paths))
        merged = self._merged_on_main(registry)
        self.s.merged_seen |= merged
        return merged

    async def gather_and_claim(self, stepped: bool = False) -> str | None:
        """Gather from the board (what is merged, what is claimed), then claim one free feature.

        Merged features are known from PATCH_SUMMARY entries; git is only touched to build. Without the board
        (the baseline, the no-board ablation) it gathers from main alone and claims nothing: a feature not on
        main, at random (peers, if any, collide on the forge). A gather is a step, but the first of a turn, which
        the wake-up's step covers (`stepped`)."""
        if not stepped:
            await self.think("gather")
        if not self.board:
            return await self.gather_from_main()
        board = await self.tool("board_read", limit=2000)
        done = {f for _, f in SUMMARY_RE.findall(board)} | self.s.merged_seen
        self.s.summaries = len(done)
        # Who holds what: the board's claim index when the run has it (rule `lease`: found by key whatever the
        # size of the recent view), else the claims the recent view still shows.
        claims = self._active_claims(await self.tool("board_claims") if self.keyed else board)
        if self.s.wind_down:
            await self.say("Wind-down: no new features.")
            return None
        # My own unfinished claims first (after a restart), then unclaimed features.
        names = [f.name for f in self.task.features()]
        mine = [
            n for n in names if claims.get(n, (0, ""))[1] == self.s.worker and n not in done and n not in self.s.lost
        ]
        released = {(w, f) for _, w, f in RELEASE_RE.findall(board)}
        for f, winner in list(self.s.backed_off.items()):
            if (winner, f) in released:  # the claim it lost to was given up: the feature is open again
                del self.s.backed_off[f]
        free = [n for n in names
                if n not in done and n not in claims and n not in self.s.lost and n not in self.s.backed_off]
        if mine:
            return mine[0]
        deps = self._deps()
        if deps and free:  # only a feature whose dependencies are all merged can pass its checks
            ready = [n for n in free if all(d in done for d in deps.get(n, ()))]
            if not ready:  # the board's view may lag behind main: look at main itself before waiting
                done |= await self.fetch_main()
                ready = [n for n in free if all(d in done for d in deps.get(n, ()))]
            if not ready:
                return await self.gather_and_claim() if await self._wait_for_deps(free) else None  # (a step first)
            free = ready
        if not free:
            return None
        self.s.waits = 0
        feature = self.rng.choice(free)
        await self.think("claim")
        entry = await self.tool(
            "board_write",
            type="CLAIM",
            text=f"claim {feature}: {self._label(feature)} + registry line",
        )
        my_seq = int(re.search(r"#(\d+)", entry).group(1))
        # Settle a collision: the earliest claim wins, later claimants back off and say so by DM.
        if self.keyed:  # the open claims on this key, oldest first, however many entries are about it
            same = await self.tool("board_claims", key=feature)
        else:  # (rule `legacy`): the 200 newest entries about it
            same = await self.tool("board_grep", pattern=f"(claim|release) {re.escape(feature)}:", limit=200)
        rivals = [(seq, w) for seq, w, f in self._open_claims(same) if f == feature and w != self.s.worker]
        earlier = [(seq, w) for seq, w in rivals if seq < my_seq]
        if earlier:
            seq, winner = min(earlier)
            self.s.backed_off[feature] = winner  # not lost for good: free again once the winner releases it
            if self.chat:
                await self.tool(
                    "send_dm",
                    to=winner,
                    text=f"{self.s.worker} here: we both claimed {feature}; yours (#{seq}) came first, I back off.",
                )
            await self.note(type="FAIL", text=f"release {feature}: {winner} claimed it first")
            return await self.gather_and_claim()
        return feature

    async def gather_from_main(self) -> str | None:
        merged = await self.fetch_main()
        if self.s.wind_down:
            await self.say("Wind-down: no new features.")
            return None
        free = [f.name for f in self.task.features() if f.name not in merged and f.name not in self.s.lost]
        deps = self._deps()
        if deps and free:
            ready = [n for n in free if all(d in merged for d in deps.get(n, ()))]
            if not ready:
                if not await self._wait_for_deps(free):
                    return None
                await self.think("gather")
                return await self.gather_from_main()
            free, self.s.waits = ready, 0
        return self.rng.choice(free) if free else None

    def _claims(self, board: str) -> list[tuple[int, str, str]]:
        return [(int(seq), w, f) for seq, w, f in CLAIM_RE.findall(board)]

    def _open_claims(self, board: str) -> list[tuple[int, str, str]]:
        """The claims their claimant has not released since (a release covers that worker's earlier claims
        of the feature: its own back-off, or its host's release when it stopped or its host died)."""
        last_release: dict[tuple[str, str], int] = {}
        for seq, w, f in RELEASE_RE.findall(board):
            last_release[(w, f)] = max(int(seq), last_release.get((w, f), 0))
        return [(seq, w, f) for seq, w, f in self._claims(board) if seq > last_release.get((w, f), 0)]

    def _active_claims(self, board: str) -> dict[str, tuple[int, str]]:
        """feature -> (seq, worker) of the earliest claim not released or summarised by its claimant."""
        summarised = set(SUMMARY_RE.findall(board))
        out: dict[str, tuple[int, str]] = {}
        for seq, w, f in self._open_claims(board):
            if (w, f) in summarised:
                continue
            if f not in out or seq < out[f][0]:
                out[f] = (seq, w)
        return out

    async def build(self, feature: str) -> None:
        f = next(x for x in self.task.features() if x.name == feature)
        branch = f"{self.s.worker}/{feature}"
        merged = await self.fetch_main()
        if feature in merged:
            await self.note(type="FAIL", text=f"release {feature}: already on main")
            self.s.lost.add(feature)
            return
        if missing := [d for d in f.deps if d not in merged]:  # (a stale claim from an earlier turn): not yet
            await self.note(type="FAIL", text=f"release {feature}: needs {', '.join(missing)} on main first"[:100])
            return
        await self.say(f"Building {feature} on {branch}.")
        await self.sh("git", "checkout", "-q", "-B", branch, "origin/main")
        for _ in range(write_steps(f.size, self.cfg.config.lines_per_step)):  # a step per lines_per_step lines
            await self.think("write")
        for helper in f.helpers:  # a shared helper not on main yet: this worker writes it (maybe a peer too)
            await self.add_helper(helper)
        if self.rng.random() < self.cfg.config.observe_rate:
            await self.note(type="OBSERVED",
                text=f"{feature}: reference output checked on the sample inputs before coding",
            )
        code = self.task.oracle_module(feature)
        buggy = self.rng.random() < self.cfg.config.bug_rate
        if buggy:
            find, replace = self.task.oracle_bug(feature)
            code = code.replace(find, replace, 1)
        await self.write(f.module, code)
        await self.add_registry_line(f.registry_line, f.registry)
        await self.think("verify")
        rc, out = await self.sh(sys.executable, "checks/check.py", feature, check=False)
        if rc != 0:
            reason = out.strip().splitlines()[-1] if out.strip() else "check failed"
            await self.note(type="FAIL", text=f"{feature}: first attempt failed its check"[:100],
                            detail=reason[:2000])
            await self.think("fix")
            await self.write(f.module, self.task.oracle_module(feature))
            rc, out = await self.sh(sys.executable, "checks/check.py", feature, check=False)
            if rc != 0:
                await self.note(type="FAIL", text=f"release {feature}: still failing, giving up",
                                detail=out[-2000:])
                self.s.lost.add(feature)
                return
        await self.note(type="FACT", text=f"{feature}: matches the reference on the visible checks")
        await self.sh("git", "add", "-A")
        await self.sh("git", "commit", "-q", "-m", f"Add {feature}")
        # The branch is this worker's own: a rebuilt branch replaces an abandoned attempt.
        await self.sh("git", "push", "-q", "-f", "-u", "origin", f"HEAD:refs/heads/{branch}")
        opened = await self.tool(
            "pr_create", head=branch, title=f"Add {feature}", body=f"Implements `{feature}`; checks pass."
        )
        for _ in range(12):
            if not AWAY_RE.search(opened):
                break
            await self.think("retry")  # the forge is restarting: the PR may exist already
            mine = re.search(rf"PR #(\d+) \[open\] {re.escape(branch)} ", await self.tool("pr_list", state="open"))
            opened = mine.group(0) if mine else await self.tool(
                "pr_create", head=branch, title=f"Add {feature}", body=f"Implements `{feature}`; checks pass.")
        m = PR_RE.search(opened)
        if not m:
            await self.note(type="FAIL", text=f"release {feature}: could not open a PR", detail=opened)
            self.s.lost.add(feature)
            return
        number = int(m.group(1))
        if await self.merge(number, branch, feature):
            self.s.mine.add(feature)
            await self.note(type="PATCH_SUMMARY",
                text=f"{feature}: added {self._label(feature)} and its registry line; PR #{number} merged",
            )

    async def check_main(self) -> None:
        """With nothing left to claim: check main in proportion to what changed, and report it. Skipped when
        main is a commit this worker checked or saw reported (a FACT/FAIL on the board, a channel post);
        else only the features touched since the newest such commit on main's history (every registered one
        when there is none), a seeded sample of `verify_sample` when more. A check is a step."""
        if self.board and self.s.main_checked and self.s.summaries == self.s.summaries_at_check:
            return  # no merge on the board since its last look at main: main has not changed (no git needed)
        self.s.summaries_at_check = self.s.summaries
        await self.sh("git", "fetch", "-q", "origin")
        _, sha = await self.sh("git", "rev-parse", "origin/main")
        sha = sha.strip()[:12]
        if sha in self.s.main_checked:
            return
        _, history = await self.sh("git", "rev-list", "--first-parent", "--max-count=2000", "origin/main")
        base = next((c[:12] for c in history.split() if c[:12] in self.s.main_checked), None)
        await self.think("verify")
        merged = await self.registered_on_main()
        features = [f for f in self.task.features() if f.name in merged]
        if base is None:
            touched = {f.name for f in features}
        else:
            _, diff = await self.sh("git", "diff", "--name-only", base, "origin/main")
            touched = features_touched(diff.split(), {f.name: f.module for f in features},
                                       {f.name: f.helpers for f in features}, self.task.shared_paths) & merged
        names = verify_plan(touched, self.cfg.config.verify_sample, self.rng)
        self.s.main_checked.add(sha)
        since = f"since main {base}" if base else "since the start"
        if not names:
            await self.tell(f"main {sha} passes: no feature touched {since}")
            return
        await self.sh("git", "checkout", "-q", "--detach", "origin/main")
        rc, out = await self.sh(sys.executable, "checks/check.py", *names, check=False)
        failed = [l for l in out.splitlines() if l.startswith("FAIL")]
        what = f"{len(names)} of {len(touched)} feature(s) touched {since}"
        if rc == 0:
            await self.tell(f"main {sha} passes the visible checks of {what}"[:100])
        else:
            await self.note(type="FAIL", text=f"main {sha} fails {len(failed)} check(s) of {what}"[:100],
                            detail="\n".join(failed)[:4000])

    async def tell(self, text: str) -> None:
        """Tell everyone: the channel (every peer reads it at its next turn), else a FACT, else its own output."""
        if self.chat:
            await self.tool("channel_post", text=text)
        elif self.board:
            await self.note(type="FACT", text=text)
        else:
            await self.say(text)

    async def add_helper(self, name: str) -> None:
        """Write a shared helper's line just above its file's end mark, unless main has it already."""
        path, line = self.task.oracle_helper(name)
        text = await self.read(path)
        lines = text.splitlines(keepends=True)
        if any(l.rstrip("\n") == line for l in lines):
            return
        await self.think("helper")
        marks = [i for i, l in enumerate(lines) if l.startswith("# -- end of helpers")]
        lines.insert(marks[-1] if marks else len(lines), line + "\n")
        await self.write(path, "".join(lines))

    async def add_registry_line(self, line: str, path: str | None = None) -> None:
        path = path or self.task.registry_path
        text = await self.read(path)
        lines = text.splitlines(keepends=True)
        close = max(i for i, l in enumerate(lines) if l.strip() == "}")
        lines.insert(close, line.rstrip("\n") + "\n")
        await self.write(path, "".join(lines))

    async def merge(self, number: int, branch: str, feature: str, attempts: int = 12) -> bool:
        await self.think("merge")
        for _ in range(attempts):
            res = await self.tool("pr_merge", number=number)
            if res.startswith("merged:") or f"PR #{number} is merged" in res:  # (a retried merge that was done)
                return True
            if AWAY_RE.search(res):  # the forge is restarting: ask again
                await self.think("retry")
                continue
            if "conflict" not in res:
                await self.note(type="FAIL", text=f"release {feature}: merge of PR #{number} failed",
                                detail=res[:2000])
                self.s.lost.add(feature)
                return False
            # Merge main into the branch, resolve, re-check what the conflict touched, push, merge again.
            await self.think("resolve")
            # A peer merged this very feature meanwhile (no board to see its claim): main's version wins.
            theirs = ["-X", "theirs"] if feature in await self.fetch_main() else []
            rc, out = await self.sh("git", "merge", "--no-edit", *theirs, "origin/main", check=False)
            if rc != 0:
                files = await self.resolve_conflicts()
                await self.sh("git", "commit", "-q", "--no-edit")
                if any(f not in (self.task.registry_paths or [self.task.registry_path]) for f in files):
                    await self.sh(sys.executable, "checks/check.py", feature)
            await self.sh("git", "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
        await self.note(type="FAIL", text=f"release {feature}: PR #{number} kept conflicting")
        self.s.lost.add(feature)
        return False

    async def resolve_conflicts(self) -> list[str]:
        """Keep both sides of every conflict (each feature adds its own registry line)."""
        _, out = await self.sh("git", "diff", "--name-only", "--diff-filter=U")
        files = out.split()
        for rel in files:
            text = await self.read(rel)
            kept = [l for l in text.splitlines(keepends=True) if not l.startswith(("<<<<<<<", "=======", ">>>>>>>"))]
            if rel in self.task.shared_paths:  # a helper both sides added: one copy
                kept = [l for i, l in enumerate(kept) if not (l.startswith("def ") and l in kept[:i])]
            await self.write(rel, "".join(kept))
            await self.sh("git", "add", rel)
        return files
