"""The embedded forge: one bare git repository served over smart HTTP, with
pull requests, an issue and an event log, all on this machine.

Layout under `root`:

    repo.git/            the bare repository (default branch main), served at /repo.git
    repo.git/hooks/      pre-receive (enforces) and post-receive (records pushes): stubs that run
                         receive_hook.py of this package, and agensh-policy.json, what it enforces
    state.jsonl          users (a salted hash of each token, never the token), the issue and PR
                         snapshots (last line per key wins)
    events.jsonl         the ForgeEvent log (one event per line, seq from 1)
    hook-events.jsonl    what the hooks saw (pushes, refused pushes), folded into events.jsonl by the forge

Design choices:

* **The forge enforces, not the prompt.** A worker can create, update,
  force-push and delete only branches named `<worker>/...`; `main` under any
  spelling that folds to it, tags and every other ref are refused; every
  commit a push brings is checked for paths a checkout could not write
  safely (`..`, `.git` in any case or form, absolute paths, backslashes,
  control characters), symlinks that point out of the tree, and files over
  the size limit (receive_hook.py, on top of git's own `receive.fsckObjects`);
  a push body over the limit is refused by the HTTP server in git's framing,
  so the pusher reads the limit (githttp.py, pktline.py). Every refusal is a
  `push_rejected` event saying why. The run's own account (`admin`) may push
  any branch but main.
* **Tokens.** A user's token is HMAC(key, name) (tokens.py); the state keeps
  a salted hash of it. The key is the run's, held by the driver and given to
  the forge actor, so a restarted forge issues the same tokens without
  having stored any; a forge without a key makes one per process.
* **How the forge's own merges get past the protection of main.** The
  pre-receive hook refuses every update of `refs/heads/main` that arrives
  through `git receive-pack`, i.e. every push. The forge never pushes: it
  merges in the object store (`git merge-tree --write-tree`, `commit-tree`),
  checks the merged tree as the hook checks a push, and moves main with
  `git update-ref refs/heads/main NEW OLD` (a compare-and-swap; update-ref
  runs no receive hooks). No worktree, no index, no checkout: a crafted path
  never reaches the disk, and a merge that fails leaves nothing behind (a ref
  lock older than 30 s, left by a process that died, is removed). It is
  reported on the PR (`merge_failed`, to its author) and in the ForgeError.
  (The hook skips its ref rules, not its content checks, when the server-side
  environment has AGENSH_FORGE_INTERNAL=1, for an operator pushing by path on
  this machine; the HTTP server never sets it.)
* **Push events.** The post-receive hook appends one JSON line per updated ref
  (user = REMOTE_USER, which the HTTP server sets from the Basic-auth
  login) to hook-events.jsonl; the pre-receive hook does the same for each
  ref of a push it refuses, with the reason. The forge folds new lines into its event log at the
  end of every push, before `git push` returns (callback from the HTTP
  server), and at the start of every API call, so a push is always in the
  log before anything that follows it.
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
  close, merge_conflict, merge_failed by someone other than the author: the
  author. A comment by the author (a reply): the PR's reviewers. A push to
  the head branch of an open PR: its reviewers. Always plus the known users
  @mentioned in the body, never the actor.
* **Reviews.** Like Gitea, an author cannot approve or request changes on
  their own PR (pr_comment is for that); reviews need an open PR, comments
  do not.

Modules: `forge.py` the API and the PR rules only this forge applies,
`git.py` the git runner (merges without a worktree), `store.py` state.jsonl
and events.jsonl, `tokens.py` the users' tokens and their hashes, `hooks.py`
installing the hooks, their policy and limits, and folding what they record,
`receive_hook.py` the hook program itself (and the checks the merge reuses).
"""

from __future__ import annotations

from agensh_ray.services.forge.embedded.forge import PROTECTION_MESSAGE, REPO_NAME, EmbeddedForge
from agensh_ray.services.forge.rules import MAX_DIFF_CHARS, PROTECTED_BRANCH

__all__ = ["EmbeddedForge", "MAX_DIFF_CHARS", "PROTECTED_BRANCH", "PROTECTION_MESSAGE", "REPO_NAME"]
