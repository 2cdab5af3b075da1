"""A fake Gitea (API v1 as in Gitea 1.27) on loopback, for tests of the
Gitea adapter, the provisioning and the webhook intake. No Gitea can run here.

What it stands in for, and how faithfully:

* **REST**: the endpoints the adapter and the provisioning use (users, tokens,
  orgs, repos, collaborators, issues, comments, branch protections, hooks,
  branches, pull requests, reviews, merges, changed files, diffs), with
  Gitea's status codes and refusals (token creation needs Basic auth; an
  author cannot approve or reject their own PR; a COMMENT review needs a
  body; a merge while the mergeability check has not finished, or of a PR
  that conflicts, is `405 Please try again later`; a conflict found by the
  merge itself is 409). Every request and response body is checked against
  the official swagger file (`agensh_ray.services.fakes.contract`); the tests assert
  zero violations.
* **git**: real repositories served over smart HTTP (`git http-backend`, the
  embedded forge's server), Basic auth with a password or a token; pushes
  need write access; protected branches with `enable_push: false` reject
  pushes in a pre-receive hook, as Gitea does. Gitea keeps
  `refs/pull/N/head`; so does the fake.
* **mergeability**: as in Gitea, opening a PR or moving its head or base puts
  it in the `checking` state and a background checker decides
  mergeable/conflict (real `git merge-tree`). `hold_checks()` keeps PRs in
  `checking` (a busy Gitea queue); `before_merge` runs between the check and
  the merge (the window in which a real Gitea returns 409).
* **webhooks**: `gitea`-type hooks get the JSON payloads (push,
  pull_request opened/closed/synchronized, reviews, PR comments) with
  `X-Gitea-Event`, `X-Gitea-Event-Type`, `X-Gitea-Delivery` and
  `X-Gitea-Signature` (HMAC-SHA256 hex of the body), delivered in order by
  one thread. The payload parts that the spec defines (pull_request,
  repository, sender, issue, comment, commits) are contract-checked.

Not modelled: teams, labels, milestones, organizations' member lists,
rate limits, pagination headers beyond `page`/`limit`.

How the package is put together: one module per resource, composed as
mixins of one class. Gitea's resources are not independent: a PR is an
issue, a merge is a ref update that fires a push webhook and re-checks other
PRs, a repository's JSON is inside every PR, issue and webhook payload. So
every resource works on the same state (`server.GiteaServer`: the dicts of
users, tokens, orgs and repos, behind one lock) and calls the others'
helpers through `self`, as the single class of before did; a mixin per
resource keeps each resource's routes, records and JSON shapes together
without threading a state object through every call. The resource
modules import only `server` (its helpers and `ApiError`) and `git`
(`ZERO`); nothing imports this package's `__init__` but its users.

| module | holds |
|---|---|
| `server.py` | state, lifecycle, one port for REST and git, auth (`whoami`, permissions), top-level dispatch |
| `users.py` | admin user API, users, access tokens |
| `orgs.py` | organizations and creating their repositories |
| `repos.py` | a repository's JSON, collaborators, branches, branch protections; routes `/repos/...` |
| `hooks.py` | webhook config, payloads, signed in-order delivery |
| `issues.py` | issues and comments |
| `pulls.py` | PRs, reviews, merges, diffs and changed files, the mergeability checker |
| `git.py` | bare repositories, push policy, ref updates |
| `receive_hook.py` | the git hook itself (pre- and post-receive), a real file run with `python -I -S` |
"""

from __future__ import annotations

from agensh_ray.services.fakes.gitea.git import GitRepos
from agensh_ray.services.fakes.gitea.hooks import HooksApi
from agensh_ray.services.fakes.gitea.issues import IssuesApi
from agensh_ray.services.fakes.gitea.orgs import OrgsApi
from agensh_ray.services.fakes.gitea.pulls import PullsApi
from agensh_ray.services.fakes.gitea.repos import ReposApi
from agensh_ray.services.fakes.gitea.server import ApiError, GiteaServer
from agensh_ray.services.fakes.gitea.users import UsersApi

__all__ = ["ApiError", "FakeGitea"]


class FakeGitea(UsersApi, OrgsApi, ReposApi, IssuesApi, PullsApi, HooksApi, GitRepos, GiteaServer):
    """The fake Gitea. Start with `start()`; `url`, `admin_token`, `violations`, `deliveries`,
    `requests` for the tests; `hold_checks()`/`release_checks()`, `before_merge`, `wait_idle()`,
    `wait_for_request()` to stage the races a real Gitea has."""
