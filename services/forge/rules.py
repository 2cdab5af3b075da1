"""What both forges (the embedded one and the Gitea adapter, with its webhook
mapper) decide the same way, written once: who an event notifies, how a
branch name and an @mention are read, how long a diff may be, what an event's
detail says, and the refusals an agent reads, word for word.

An agent switches forge by a command-line flag; what it is told must not
change with it. Each adapter keeps only what its backend does differently
(git on disk, or Gitea's REST answers)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import get_args

from agensh_ray.errors import ForgeError
from agensh_ray.inputs import forge_text_problem, one_line_problem
from agensh_ray.models import ReviewVerdict

PROTECTED_BRANCH = "main"
ADMINS = ("admin",)
"""The run's own account (the driver reads and scores as it): not bound to a branch namespace."""
MAX_DIFF_CHARS = 2_000_000
"""A PR's diff is cut at this many characters (with a note saying so)."""
PR_STATES = ("open", "merged", "closed", "all")
VERDICTS = frozenset(get_args(ReviewVerdict))
_MENTION_RE = re.compile(r"(?<![\w@/])@([A-Za-z0-9][A-Za-z0-9_.-]*)")
_HEADS = "refs/heads/"

# ---------------------------------------------------------------------------- reading text


def mentions(text: str | None) -> list[str]:
    """The names @mentioned in `text`, in order, each once (a trailing '.' or '-' is punctuation)."""
    out: list[str] = []
    for m in _MENTION_RE.finditer(text or ""):
        name = m.group(1).rstrip(".-")
        if name and name not in out:
            out.append(name)
    return out


def branch_of(ref: str) -> str | None:
    """The branch a ref names (`refs/heads/x` -> `x`), None for other refs."""
    return ref[len(_HEADS):] if ref.startswith(_HEADS) else None


def branch_name(name: object, what: str, *, strip_origin: bool = False,
                well_formed: Callable[[str], bool] | None = None) -> str:
    """A branch name as an agent may write it (`x`, `refs/heads/x`, with `strip_origin` also `origin/x`),
    normalised to `x`. `well_formed(name)` (the embedded forge asks `git check-ref-format`) refuses a bad
    one; Gitea judges names itself."""
    if not isinstance(name, str) or not name.strip():
        raise ForgeError(f"pr_create needs a {what} branch name")
    name = name.strip()
    if (bad := forge_text_problem(what, name)) is not None:
        raise ForgeError(bad)
    for prefix in (_HEADS, "origin/") if strip_origin else (_HEADS,):
        name = name.removeprefix(prefix)
    if well_formed is not None and (not well_formed(name) or name.startswith("-")):
        raise ForgeError(f"{name!r} is not a valid branch name")
    return name


def truncate_diff(diff: str) -> str:
    if len(diff) > MAX_DIFF_CHARS:
        return diff[:MAX_DIFF_CHARS] + f"\n... diff truncated at {MAX_DIFF_CHARS} characters ...\n"
    return diff


# ---------------------------------------------------------------------------- who hears of an event


def concerned(kind: str, actor: str, author: str | None, reviewers: Iterable[str]) -> list[str]:
    """Who a PR event concerns before @mentions: an opened PR nobody in particular; a review, merge,
    close or conflict the author; a comment by the author (a reply) the reviewers, by anyone else the
    author; a push to the PR's head branch its reviewers."""
    if kind == "pr_opened":
        return []
    if kind == "push" or (kind == "pr_commented" and actor == author):
        return list(reviewers)
    return [author] if author else []


def notify_list(actor: str, concerned: Iterable[str | None], mentioned: Iterable[str] = ()) -> list[str]:
    """The concerned, then the (known) mentioned, each once, never the actor."""
    out: list[str] = []
    for name in [*concerned, *mentioned]:
        if name and name != actor and name not in out:
            out.append(name)
    return out


# ---------------------------------------------------------------------------- what an event says


def push_detail(ref: str, old: str, new: str) -> str:
    if set(new) <= {"0"}:
        return f"deleted {ref} (was {old[:12]})"
    if set(old) <= {"0"}:
        return f"created {ref} at {new[:12]}"
    return f"updated {ref}: {old[:12]} -> {new[:12]}"


def review_detail(verdict: str, body: str | None) -> str:
    return verdict + (f": {body}" if body else "")


def verdict_of(detail: str) -> str:
    """The verdict back out of a pr_reviewed event's detail (the trace's `verdict` column)."""
    return detail.split(":", 1)[0].strip()


def merged_detail(head: str | None, base: str | None, sha: str | None) -> str:
    return f"merged {head} into {base} as {(sha or '')[:12]}"


def conflict_detail(files: list[str]) -> str:
    return "conflicting files: " + (", ".join(files) if files else "(unknown)")


# ---------------------------------------------------------------------------- refusals


def check_pr_state(state: str) -> None:
    if state not in PR_STATES:
        raise ForgeError(f"bad state {state!r}: use one of {', '.join(PR_STATES)}")


def check_verdict(verdict: str) -> None:
    if verdict not in VERDICTS:
        raise ForgeError(f"bad verdict {verdict!r}: use one of {', '.join(sorted(VERDICTS))}")


def check_cursor(cursor: int) -> None:
    if cursor < 0:
        raise ForgeError(f"bad cursor {cursor}: use 0 for the beginning, else the last seq you saw")


def check_text(kind: str, text: str | None) -> None:
    """ForgeError if a PR text ("body", "review" or "comment"; "title" in `check_title`) is past its limit
    (agensh_ray.inputs.FORGE_TEXTS)."""
    if (bad := forge_text_problem(kind, text)) is not None:
        raise ForgeError(bad)


def check_title(title: str | None) -> None:
    if not title or not title.strip():
        raise ForgeError("give the PR a title that says what it changes")
    check_text("title", title)
    if (bad := one_line_problem(title)) is not None:  # a title shows on one line, in every PR list
        raise ForgeError(f"a PR title is one line without control characters; it has {bad} (put the rest in the body)")


def check_comment(body: str | None) -> None:
    if not body or not body.strip():
        raise ForgeError("empty comment: write something in the body")
    check_text("comment", body)


def check_head_is_not_base(head: str, base: str) -> None:
    if head == base:
        raise ForgeError(
            f"head and base are both {base}: commit on a branch of your own, push it "
            "(git push origin HEAD:refs/heads/<branch>) and open the PR from that branch"
        )


def check_own_head(author: str, head: str) -> None:
    """A PR's head is a branch of its author's namespace (`<author>/...`): a PR by w002 holds w002's work."""
    if not head.startswith(f"{author}/"):
        raise ForgeError(
            f"branch {head} is not yours: open PRs from your own branches, named {author}/<topic> "
            f"(git push origin HEAD:refs/heads/{author}/<topic>); to help with {head}, review or comment on its PR"
        )


def check_reviewable(number: int, state: str) -> None:
    if state != "open":
        raise ForgeError(f"PR #{number} is {state}: only open PRs can be reviewed (use pr_comment to remark on it)")


def check_not_own_review(number: int, reviewer: str, author: str, verdict: str) -> None:
    """Like Gitea, an author cannot approve or request changes on their own PR (pr_comment is for that)."""
    if reviewer == author and verdict != "comment":
        raise ForgeError(
            f"you opened PR #{number}: you cannot {verdict.replace('_', ' ')} your own PR; "
            "ask a peer to review it, or use pr_comment"
        )


def already_open(which: str, head: str, base: str) -> ForgeError:
    return ForgeError(
        f"{which} is already open for {head} -> {base}: push more commits to "
        f"{head} (the PR picks them up) instead of opening another PR"
    )


def no_new_commits(head: str, base: str) -> ForgeError:
    return ForgeError(
        f"branch {head} has no commits that are not already on {base}: "
        "commit your work, push it to the branch, then open the PR"
    )


def branch_not_pushed(head: str, missing: str | None = None) -> ForgeError:
    """`missing`: what is not on the forge, when it may be more than the head branch."""
    return ForgeError(
        f"branch {missing or head} not found on the forge: push it first "
        f"(git push origin HEAD:refs/heads/{head}), then open the PR"
    )


def pr_not_found(number: int, open_numbers: Iterable[int]) -> ForgeError:
    open_ = ", ".join(f"#{n}" for n in open_numbers) or "none"
    return ForgeError(f"PR #{number} not found (open PRs: {open_}); pr_list shows them all")


def an_issue_not_a_pr(number: int) -> ForgeError:
    return ForgeError(f"#{number} is an issue, not a pull request: use issue_view({number})")


def a_pr_not_an_issue(number: int) -> ForgeError:
    return ForgeError(f"#{number} is a pull request, not an issue: use pr_view({number})")
