"""The embedded forge: one bare git repository served over smart HTTP, with
pull requests, an issue and an event log, all on this machine.

Layout under `root`:

    repo.git/            the bare repository (default branch main), served at /repo.git
    repo.git/hooks/      pre-receive (protects main) and post-receive (records pushes):
                         stubs that run receive_hook.py of this package
    work/                the forge's internal worktree (a `git worktree` of repo.git)
    state.jsonl          users, the issue and PR snapshots (last line per key wins)
    events.jsonl         the ForgeEvent log (one event per line, seq from 1)
    hook-events.jsonl    what the hooks saw (pushes, rejected pushes), folded into
                         events.jsonl by the forge

Design choices:

* **How the forge's own merges get past the protection of main.** The
  pre-receive hook rejects every update of `refs/heads/main` that arrives
  through `git receive-pack`, i.e. every push. The forge never pushes: its
  internal worktree is a `git worktree` of the bare repository itself, so the
  merge commit it makes is already in the bare repository's object store and
  the forge moves main with `git update-ref refs/heads/main NEW OLD` (a
  compare-and-swap; update-ref runs no receive hooks). No fetch, no push, no
  secret bypass a worker could use. (The hook also lets through pushes whose
  *server-side* environment has AGENSH_FORGE_INTERNAL=1, for an operator
  pushing by path on this machine; the HTTP server never sets it.)
* **Push events.** The post-receive hook appends one JSON line per updated ref
  (user = REMOTE_USER, which the HTTP server sets from the Basic-auth
  login) to hook-events.jsonl; the pre-receive hook does the same for a
  rejected push to main. The forge folds new lines into its event log at the
  end of every push (callback from the HTTP server) and at the start of every
  API call, so a push is always in the log before anything that follows it.
  The byte offset reached in hook-events.jsonl is stored with each folded
  event, so a restart neither loses nor repeats one.
* **Nothing to merge.** Merging a PR whose head has no commits beyond its base
  raises ForgeError (it says to push the work or close the PR) instead of
  recording an empty merge that would look like landed work.
* **Durability.** state.jsonl and events.jsonl are appended and flushed
  (written to the OS) before a call returns, which survives a crash or restart
  of the forge's process; they are not fsync'ed (power loss may lose the
  last lines). A torn last line is cut off when loading.
* **Notify** (the rule is services/forge/rules.py, shared with Gitea).
  pr_opened: nobody in particular (plus @mentions). Review, comment, merge,
  close, merge_conflict by someone other than the author: the author. A
  comment by the author (a reply): the PR's reviewers. A push to the head
  branch of an open PR: its reviewers. Always plus the known users
  @mentioned in the body, never the actor.
* **Reviews.** Like Gitea, an author cannot approve or request changes on
  their own PR (pr_comment is for that); reviews need an open PR, comments
  do not.

Modules: `forge.py` the API and the PR rules only this forge applies,
`git.py` the git runner, `store.py` state.jsonl and events.jsonl, `hooks.py`
installing the hooks and folding what they record, `receive_hook.py` the
hook program itself.
"""

from __future__ import annotations

from agensh_ray.services.forge.embedded.forge import PROTECTION_MESSAGE, REPO_NAME, EmbeddedForge
from agensh_ray.services.forge.rules import MAX_DIFF_CHARS, PROTECTED_BRANCH

__all__ = ["EmbeddedForge", "MAX_DIFF_CHARS", "PROTECTED_BRANCH", "PROTECTION_MESSAGE", "REPO_NAME"]
