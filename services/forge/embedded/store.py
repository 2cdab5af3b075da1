"""What the embedded forge remembers, durable: state.jsonl (users with their
token's salted hash, never the token; the issue and PR snapshots; the last
line per key wins) and events.jsonl (the ForgeEvent log, seq dense from 1),
both through `applog.AppendLog`.

A state file written before tokens were hashed (a user line with "token") is
read, its tokens hashed, and the file rewritten at once without them; the
tokens read are kept in memory (`legacy_tokens`) so the forge can still hand
them out.

Both are appended and flushed (written to the OS) before a call returns, which
survives a crash or restart of the forge's process; they are not fsync'ed
(power loss may lose the last lines). A torn last line is cut off when
loading. The state log is compacted at load once it is mostly superseded
snapshots. The caller (EmbeddedForge) serialises every call."""

from __future__ import annotations

import os
from bisect import bisect_right
from pathlib import Path
from typing import Any

from agensh_ray.applog import AppendLog
from agensh_ray.models import ForgeEvent, Issue, PullRequest, now_us
from agensh_ray.services.forge.embedded.tokens import hashed

COMPACT_ABOVE_BYTES = 1_000_000
"""The state log is compacted when larger than this and more than 4 lines per live record."""


def _seq(e: ForgeEvent) -> int:
    return e.seq


class ForgeStore:
    def __init__(self, root: Path):
        self.state_path = root / "state.jsonl"
        self.events_path = root / "events.jsonl"
        self.users: dict[str, tuple[str, str]] = {}
        """user name -> (salt, hash of the token) (tokens.py)."""
        self.legacy_tokens: dict[str, str] = {}
        """Tokens read from a state file of before hashing (rewritten without them at load)."""
        self.issues: dict[int, Issue] = {}
        self.prs: dict[int, PullRequest] = {}
        self.events: list[ForgeEvent] = []
        self.hook_end = 0
        """How far into hook-events.jsonl the folded events reach (bytes)."""
        self._load()

    # ----------------------------------------------------------------- writes

    def put_user(self, name: str, salt: str, digest: str) -> None:
        self.users[name] = (salt, digest)
        self._persist("user", self._user_record(name))

    def put_issue(self, issue: Issue) -> None:
        self.issues[issue.number] = issue
        self._persist("issue", issue.model_dump())

    def put_pr(self, pr: PullRequest) -> None:
        """Record the PR's snapshot (after every change of it)."""
        self.prs[pr.number] = pr
        self._persist("pr", self._pr_record(pr))

    def emit(
        self,
        kind: str,
        actor: str,
        pr: int | None = None,
        ref: str | None = None,
        detail: str = "",
        notify: list[str] | None = None,
        ts: int | None = None,
        hook_end: int | None = None,
    ) -> ForgeEvent:
        """Append the next event; `hook_end`: the hook-events.jsonl offset it was folded up to."""
        event = ForgeEvent(
            seq=(self.events[-1].seq if self.events else 0) + 1,
            ts=ts or now_us(),
            kind=kind,
            actor=actor,
            pr=pr,
            ref=ref,
            detail=detail,
            notify=notify or [],
        )
        record = event.model_dump()
        if hook_end is not None:
            record["hook_end"] = hook_end  # not a ForgeEvent field: ignored when loading the model
        self._event_log.append(record)
        self.events.append(event)
        return event

    # ------------------------------------------------------------------ reads

    def next_number(self) -> int:
        """Issues and PRs share one number space (like Gitea)."""
        return max([0, *self.issues, *self.prs]) + 1

    def since(self, cursor: int, limit: int) -> list[ForgeEvent]:
        # seq n is at index n-1 (seqs are dense, from 1).
        i = bisect_right(self.events, cursor, key=_seq)
        return [e.model_copy(deep=True) for e in self.events[i : i + limit]]

    def close(self) -> None:
        self._state.close()
        self._event_log.close()

    # ------------------------------------------------------------------- load

    def _user_record(self, name: str) -> dict[str, str]:
        salt, digest = self.users[name]
        return {"name": name, "salt": salt, "hash": digest}

    @staticmethod
    def _pr_record(pr: PullRequest) -> dict[str, Any]:
        return pr.model_dump(exclude={"diff"})

    def _persist(self, kind: str, data: dict[str, Any]) -> None:
        self._state.append({"t": kind, **data})

    def _load(self) -> None:
        self._state = AppendLog(self.state_path)
        lines = 0
        for n, rec in enumerate(self._state.records(), 1):
            lines = n
            try:
                kind = rec.pop("t")
                if kind == "user" and "token" in rec:  # written before tokens were hashed
                    self.legacy_tokens[rec["name"]] = rec["token"]
                    self.users[rec["name"]] = hashed(rec["token"])
                elif kind == "user":
                    self.users[rec["name"]] = (rec["salt"], rec["hash"])
                elif kind == "issue":
                    issue = Issue.model_validate(rec)
                    self.issues[issue.number] = issue
                elif kind == "pr":
                    pr = PullRequest.model_validate(rec)
                    self.prs[pr.number] = pr
            except (KeyError, ValueError) as exc:
                self._state.skipped(n, exc)
        self._event_log = AppendLog(self.events_path)
        for n, rec in enumerate(self._event_log.records(), 1):
            try:
                if self.events and rec.get("seq", 0) <= self.events[-1].seq:
                    raise ValueError(f"seq {rec.get('seq')} is not above {self.events[-1].seq}")
                self.events.append(ForgeEvent.model_validate(rec))
            except ValueError as exc:
                self._event_log.skipped(n, exc)
                continue
            self.hook_end = max(self.hook_end, rec.get("hook_end") or 0)
        live = len(self.users) + len(self.issues) + len(self.prs)
        if self.legacy_tokens or (self._state.size > COMPACT_ABOVE_BYTES and lines > 4 * live):
            self._compact()

    def _compact(self) -> None:
        """Rewrite the state log as one line per live record (a new file, then an atomic rename)."""
        self._state.close()
        tmp = self.state_path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        with AppendLog(tmp) as compact:
            compact.append_many(
                [{"t": "user", **self._user_record(name)} for name in self.users]
                + [{"t": "issue", **issue.model_dump()} for issue in self.issues.values()]
                + [{"t": "pr", **self._pr_record(pr)} for pr in self.prs.values()]
            )
        os.replace(tmp, self.state_path)
        self._state = AppendLog(self.state_path)
