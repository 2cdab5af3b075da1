"""Every error one part of agensh-ray raises for another part to catch.

Refusals meant for an agent (`BoardError`, `ChatError`, `ForgeError`,
`MergeConflict`, `ToolFailure`) are worded for the model that reads them:
what was wrong and what to do instead. They cross Ray calls as values of
their own class (the API errors reduce to their plain parent), so the worker
host turns any of them into a tool result without knowing which service
raised it.
"""

from __future__ import annotations


class BoardError(ValueError):
    """A board request was refused; the message says why, worded for the agent."""


class ChatError(ValueError):
    """A message that cannot be sent, worded for the agent."""


class ForgeError(Exception):
    """Any forge refusal but a conflict (unknown PR, PR not open, bad branch...), worded for the agent."""


class BadWebhook(ValueError):
    """A signed webhook body without the shape the intake reads (not JSON, nested too deep, a field of the
    wrong type); the message names the problem. The intake answers it with 400."""


class MergeConflict(Exception):
    """A PR cannot merge cleanly; `files` lists the conflicting paths."""

    def __init__(self, pr: int, files: list[str]):
        self.pr = pr
        self.files = files
        super().__init__(
            f"PR #{pr} conflicts with main in {len(files)} file(s): {', '.join(files)}. "
            "Merge main into your branch, resolve the conflicts, push, then merge again."
        )

    def __reduce__(self):
        return (MergeConflict, (self.pr, self.files))


class GiteaAPIError(ForgeError):
    """Gitea answered an API call with an error status."""

    def __init__(self, status: int, message: str, method: str, path: str):
        self.status, self.message = status, message
        super().__init__(f"Gitea refused {method} {path}: {status} {message}".strip())

    def __reduce__(self):
        # Crossing a process boundary (a Ray actor call) it becomes the plain ForgeError it is for the agent.
        return (ForgeError, (str(self),))


class MattermostAPIError(ChatError):
    """Mattermost answered an API call with an error status."""

    def __init__(self, status: int, message: str, method: str, path: str):
        self.status, self.message = status, message
        super().__init__(f"Mattermost refused {method} {path}: {status} {message}".strip())

    def __reduce__(self):
        # Crossing a process boundary (a Ray actor call) it becomes the plain ChatError it is for the agent.
        return (ChatError, (str(self),))


class ToolFailure(Exception):
    """An error the model can act on: its message is returned as the tool result."""


AGENT_REFUSALS = (BoardError, ChatError, ForgeError, MergeConflict)
"""The service refusals a tool call turns into a message for the agent (see `ToolFailure`)."""


class AgentDied(Exception):
    """The agent process exited or its connection broke; the worker restarts it."""


class TurnDeadline(AgentDied):
    """The turn passed its deadline (the agent hung: a stuck call, a SIGSTOP): its process group was killed; the
    worker restarts it with a hand-off like after a crash. `stopped`: the agent was seen stopped (SIGSTOP) and
    killed for that, before its deadline."""

    def __init__(self, message: str, stopped: bool = False):
        super().__init__(message)
        self.stopped = stopped


class AgentNeedsCredentials(AgentDied):
    """The agent refused to start a session for lack of credentials (a restart will not help)."""


class TurnFailed(Exception):
    """The agent answered the prompt with an error (e.g. its model endpoint failed); the process lives on."""


class HarnessError(ValueError):
    """An unknown harness name, or an agent CLI that cannot be found or configured."""


class ConfinementError(PermissionError):
    """A file operation beneath a worker's folder refused (agensh_ray/confined.py): `path` as it was named and
    `reason` (a link on the way, outside, not a regular file, too large); the message reads "PATH is REASON"."""

    def __init__(self, path, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{self.path} is {reason}")

    def __reduce__(self):
        return (ConfinementError, (self.path, self.reason))


class SandboxUnavailable(Exception):
    """Bubblewrap cannot sandbox the workers on this machine (the message says why and what to do)."""


class TaskError(Exception):
    """A task that cannot be found, read or run, with a message saying which and why."""


class TaskUnavailable(TaskError):
    """A task this machine cannot run or score (a ProgramBench instance without a container engine, its
    image or its test blobs); the message names each missing piece and how to provide it."""


class SandboxError(TaskError):
    """The scoring sandbox (bubblewrap) cannot run here; the message says why."""


class SubmissionError(TaskError):
    """A submission that cannot be scored as given (not a folder or archive, no compile.sh)."""


class UnknownService(ValueError):
    """An unknown forge or chat name, or one missing a setting it needs."""


class CapacityError(RuntimeError):
    """The cluster cannot host the requested workers."""


class ProvisionError(Exception):
    """Provisioning Gitea/Mattermost for a run cannot go on (an empty token file, a token that is not a site
    admin's, a repository whose #1 is taken, a failed seed push); the message says what to do."""


class HostGone(Exception):
    """A worker host a router feeds is gone for good (its actor died): the router stops routing to it.
    Any other error of a delivery is transient: the router sends the batch again."""


class HostAway(Exception):
    """A worker host a router feeds is being restarted: the delivery is sent again (a warning, no traceback)."""


class GatewayError(ValueError):
    """The model gateway cannot be set up as asked (no price map, a bad override or limits file, no upstream
    for the harness); the message names the file or setting and what to do."""


class RunFolderError(ValueError):
    """The run folder cannot be used (a file, unwritable, outside --run-dir, an earlier run's without
    --overwrite); the message says which and why. The CLI exits with code 2."""


class ForcedStop(BaseException):
    """A second SIGINT/SIGTERM to the driver: stop now, without the orderly steps (agensh_ray/stopping.py).
    A BaseException, like KeyboardInterrupt, so no `except Exception` on the way swallows it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"signal {signum} received twice: forced stop")
