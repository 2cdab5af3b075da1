"""What a worker's agent may do when it asks permission (ACP
session/request_permission) or runs a command through our terminal (ACP
terminal/create): an allow-list by the tool call's `kind`, and for commands
by program, with the rules below. Every refusal says why, worded for the
agent. docs/real-agents.md has the table.

- think, switch_mode: allowed.
- read, search, edit, delete, move, other: every path the call names must
  resolve inside the workdir.
- fetch: refused (workers reach only their forge, tools and model).
- execute (and any call carrying a command line): the line is parsed as the
  shell would split it (shlex; `;`, `&&`, `||`, `|`, `&`, subshells, `$(...)`
  and backquotes, `sh -c`, here-documents skipped as data); every program
  must be on `PROGRAMS`; every path argument (a word starting with `/`, `~`
  or `$HOME`, or holding a `..` component, also after `=` and after a
  redirection) must resolve inside the workdir, but for /dev/null and its
  kin and, in a sandbox, /tmp (private to the worker there). `git push` may
  not write main in any spelling (main, heads/main, refs/heads/main, any
  case), force (-f, --force, --force-with-lease, +refspec, --mirror), push
  everything (--all, --tags, --prune, `:`, a `*` refspec), make a branch
  named HEAD, or delete a branch outside the worker's own `<worker>/`
  namespace.

The sandbox (sandbox.py) is the boundary; this policy is the first line,
against mistakes and plain prompt injection: it cannot see through aliases,
variables or programs that write files themselves.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agensh_ray.agent.shellwords import ASSIGNMENT, flag_value, pattern_index, substitutions, without_heredocs, wrapped
from agensh_ray.confined import Confined

PROGRAMS = frozenset([
    ":", ".", "[", "alias", "awk", "basename", "bc", "break", "cat", "cd", "chmod", "cmp", "column", "comm",
    "command", "continue", "cp", "cut", "date", "declare", "diff", "dirname", "du", "echo", "egrep", "env", "eval",
    "exec", "exit", "export", "expr", "false", "fgrep", "file", "find", "fmt", "fold", "for", "gawk", "getconf",
    "git", "grep", "gunzip", "gzip", "head", "hexdump", "id", "install", "jobs", "join", "jq", "kill", "less", "ln",
    "local", "ls", "make", "md5sum", "mkdir", "mktemp", "more", "mv", "nice", "nl", "nohup", "node", "npm", "npx",
    "od", "paste", "patch", "printenv", "printf", "ps", "pwd", "pytest", "python", "read", "readlink", "realpath", "return",
    "rev", "rg", "rm", "rmdir", "sed", "seq", "set", "sh", "sha1sum", "sha256sum", "shift", "shuf", "sleep", "sort",
    "source", "split", "stat", "stdbuf", "strings", "tac", "tail", "tar", "tee", "test", "time", "timeout", "touch",
    "tr", "tree", "true", "type", "uname", "uniq", "unset", "unzip", "wait", "wc", "which", "xargs", "xxd", "yes",
    "zcat", "zip", "bash", "dash", "zsh", "cc", "gcc", "g++", "clang", "ld", "ar", "cargo", "rustc", "go", "java",
    "javac", "ruff", "mypy", "black", "tsc"
])
"""Programs and shell builtins a worker may run (plus python3.X, pip*, and programs inside its workdir)."""
VERSIONED = re.compile(r"^(python|pip)\d*(\.\d+)*$")
NO_ROOT = frozenset({"sudo", "su", "doas", "pkexec", "runuser"})
SHELLS = frozenset({"sh", "bash", "dash", "zsh"})
KEYWORDS = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "in", "esac",
                      "case", "select", "function"})
TEXT_ARGS = frozenset({"echo", "printf", "test", "[", "true", "false", ":", "alias", "declare", "export", "local",
                       "read", "set", "unset", "type", "which", "command", "date", "expr", "bc"})
"""Their arguments are text, not paths."""
PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "rg", "sed", "awk", "gawk", "jq"})
"""Their first operand is a pattern or a program (unless -e/-f gives it), not a path."""
PATTERN_FLAGS = ("-e", "--regexp", "--expression")
CODE_FLAGS = {"python": ("-c",), "node": ("-e", "-p", "--eval", "--print"), "sh": ("-c",)}
DEVICES = frozenset({"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/stdin", "/dev/stdout",
                     "/dev/stderr", "/dev/tty"})
SEPARATORS = frozenset({";", "&", "&&", "|", "||", "|&", ";;", "(", ")"})
REDIRECT = re.compile(r"^\d*(<|>|>>|<>|>\||&>|&>>|>&|<&)$")
PATH_KEYS = ("path", "file_path", "filePath", "notebook_path", "cwd", "directory", "dir", "source", "destination",
             "old_path", "new_path", "oldPath", "newPath", "target", "workdir")
MAX_DEPTH = 4
PATH_KINDS = ("read", "search", "edit", "delete", "move", "other")
"""ACP tool kinds allowed when every path they name is inside the workdir (and a command, if any, passes)."""


class Refused(Exception):
    """A refusal; the message is the reason the agent reads."""


@dataclass
class _Where:
    """Where a command line stands as it runs: its folder (after `cd`) and branch (after `git checkout -b`)."""

    cwd: Path
    branch: str | None = None


def _branch(ref: str) -> str:
    """The branch a push destination names as git resolves it on the remote (`refs/heads/x`, `heads/x`, `x`)."""
    return ref.removeprefix("refs/heads/").removeprefix("heads/")


class PermissionPolicy:
    """The rules for one worker: its workdir, its branch namespace, whether its /tmp is private."""

    def __init__(self, workdir: Path, worker_id: str, private_tmp: bool = False):
        self.workdir = Path(workdir).resolve()
        self.worker_id = worker_id
        self.private_tmp = private_tmp

    # -- entry points ----------------------------------------------------------------------
    def tool_call(self, kind: str | None, title: str, raw_input, locations: Iterable[str] = ()) -> str | None:
        """Why a tool call the agent asks permission for is refused, or None to allow it."""
        try:
            self._tool_call(kind, title or "", raw_input, list(locations))
        except Refused as exc:
            return str(exc)
        return None

    def command(self, line: str | list[str], cwd: Path | None = None) -> str | None:
        """Why a command (a shell line, or an argv) is refused, or None to allow it."""
        try:
            where = _Where(self._inside(str(cwd), "the working directory") if cwd else self.workdir)
            if isinstance(line, str):
                self._line(line, where, 0)
            else:
                self._simple([str(a) for a in line], [], where, 0)
        except Refused as exc:
            return str(exc)
        return None

    # -- tool calls ------------------------------------------------------------------------
    def _tool_call(self, kind, title, raw, locations) -> None:
        if kind in ("think", "switch_mode"):
            return
        if kind is not None and kind not in PATH_KINDS + ("execute", "fetch"):
            raise Refused(f"a tool call of kind `{kind}` is not on the list (read, search, edit, delete, move, "
                          "execute, think, switch_mode, other)")
        if kind == "fetch":
            raise Refused("fetching from the web is not allowed: workers reach only the forge, their tools and "
                          "their model")
        raw = raw if isinstance(raw, dict) else {}
        paths = [p for p in locations if p] + [str(raw[k]) for k in PATH_KEYS if isinstance(raw.get(k), str)]
        for p in paths:
            self._inside(p, "the path")
        command = raw.get("command", raw.get("cmd"))
        if kind == "execute" or command:
            if not command:
                command = title.strip().strip("`").strip()
            if not command:
                raise Refused("there is no command line to check; say what you run")
            cwd = next((raw[k] for k in ("cwd", "workdir") if isinstance(raw.get(k), str)), None)
            reason = self.command(command if isinstance(command, str) else [str(c) for c in command],
                                  Path(cwd) if cwd else None)
            if reason:
                raise Refused(reason)

    # -- paths -----------------------------------------------------------------------------
    def _inside(self, path: str, what: str, base: Path | None = None) -> Path:
        """`path` resolved (from `base`), or Refused when it is outside the workdir (and not allowed anyway)."""
        if path.startswith(("~", "$HOME", "${HOME}")):
            raise Refused(f"{what} `{path}` is in a home folder, outside your workdir {self.workdir}; "
                          "work inside your clone")
        p = Path(path)
        if not p.is_absolute():
            p = (base or self.workdir) / p
        try:
            resolved = p.resolve()
        except OSError as exc:  # a link loop, or a name swapped between two steps of realpath
            raise Refused(f"{what} `{path}` cannot be resolved ({exc.strerror}); work inside your clone") from None
        if resolved == self.workdir or self.workdir in resolved.parents:
            return resolved
        s = str(p)
        if s in DEVICES or s.startswith("/dev/fd/") or str(resolved) in DEVICES:
            return resolved
        if self.private_tmp and (s == "/tmp" or s.startswith("/tmp/")) and ".." not in p.parts:
            return Path(s)
        raise Refused(f"{what} `{path}` is outside your workdir {self.workdir}; work inside your clone")

    def _check_word(self, word: str, base: Path) -> None:
        """A word that looks like a path must be inside the workdir (also the value after `=`)."""
        for w in (word, word.partition("=")[2]):
            if not w:
                continue
            if w.startswith(("/", "~", "$HOME", "${HOME}")) or ".." in Path(w).parts:
                self._inside(w, "the path", base)

    # -- command lines -----------------------------------------------------------------------
    def _line(self, text: str, where: _Where, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Refused("the command nests shells too deeply to check; run the commands one by one")
        text, inner = substitutions(without_heredocs(text))
        for sub in inner:
            self._line(sub, where, depth + 1)
        lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
        lex.whitespace_split = True
        try:
            tokens = list(lex)
        except ValueError as exc:
            raise Refused(f"the command line cannot be parsed ({exc}); quote it properly") from None
        words: list[str] = []
        redirects: list[str] = []
        i = 0
        while i <= len(tokens):
            tok = tokens[i] if i < len(tokens) else ";"
            if tok in SEPARATORS:
                self._simple(words, redirects, where, depth)
                words, redirects = [], []
            elif REDIRECT.match(tok):
                target = tokens[i + 1] if i + 1 < len(tokens) else ""
                if not (tok.endswith("&") and (target.isdigit() or target == "-")):
                    redirects.append(target)
                i += 1
            elif tok in ("<<", "<<-", "<<<"):
                i += 1  # a here-document's delimiter or a here-string: data
            else:
                words.append(tok)
            i += 1

    def _simple(self, words: list[str], redirects: list[str], where: _Where, depth: int) -> None:
        """Check one simple command (and follow a `cd` or a change of branch)."""
        base = where.cwd
        for r in redirects:
            self._inside(r, "the redirection target", base)
        while words and (words[0] in KEYWORDS or ASSIGNMENT.match(words[0])):
            if ASSIGNMENT.match(words[0]):
                self._check_word(words[0], base)
            words = words[1:]
        if not words:
            return
        prog, args = words[0], words[1:]
        name = prog.rsplit("/", 1)[-1]
        if "/" in prog and not prog.startswith("/"):
            self._inside(prog, "the program", base)  # a program of the workdir: anything goes
            for a in args:
                self._check_word(a, base)
            return
        if name in NO_ROOT:
            raise Refused(f"`{name}` is refused: workers have no root")
        if name not in PROGRAMS and not VERSIONED.match(name):
            raise Refused(f"`{name}` is not on the list of programs workers may run (coreutils, text tools, git, "
                          "python, node, make, compilers); do it with those")
        self._program(name, args, where, depth)

    def _program(self, name: str, args: list[str], where: _Where, depth: int) -> None:
        base = where.cwd
        family = "python" if VERSIONED.match(name) and name.startswith("python") else name
        if name in SHELLS:
            family = "sh"
        if family == "eval":
            self._line(" ".join(args), where, depth + 1)
            return
        if family == "command" and args[:1] in (["-v"], ["-V"]):
            return  # a lookup, not a run
        if family in ("env", "time", "timeout", "nice", "nohup", "command", "exec", "xargs", "stdbuf"):
            rest = wrapped(family, args)
            for a in args[: len(args) - len(rest)]:
                self._check_word(a, base)
            if rest:
                self._simple(rest, [], where, depth + 1)
            return
        if family == "sh":
            code = flag_value(args, ("-c",), cluster=True)
            if code is not None:
                self._line(code, where, depth + 1)
                return
        if family == "cd":
            target = next((a for a in args if not a.startswith("-")), None)
            if target is None:
                raise Refused(f"`cd` alone goes to the home folder, outside your workdir {self.workdir}")
            if target != "-":
                where.cwd = self._inside(target, "the folder", base)
            return
        if name not in TEXT_ARGS:
            skip = pattern_index(args) if family in PATTERN_FIRST else None
            code_flags = CODE_FLAGS.get(family, ()) + (PATTERN_FLAGS if family in PATTERN_FIRST else ())
            for i, a in enumerate(args):
                if i == skip or (i > 0 and args[i - 1] in code_flags):
                    continue
                self._check_word(a, base)
        if family == "kill":
            self._kill(args)
        if family == "git":
            self._git(args, where)

    def _kill(self, args: list[str]) -> None:
        targets = [a for a in args[1:] if a != "--"] if args and args[0].startswith("-") else args
        for t in targets:
            if t.lstrip("-").isdigit() and (t.startswith("-") or int(t) == 0):
                raise Refused(f"`kill {t}` would signal a whole process group; kill your own processes by pid")

    # -- git ---------------------------------------------------------------------------------
    def _git(self, args: list[str], where: _Where) -> None:
        i = 0
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env") else 1
        sub, rest = (args[i], args[i + 1:]) if i < len(args) else ("", [])
        if sub == "push":
            self._push(rest, where)
        elif sub in ("checkout", "switch"):
            new = flag_value(rest, ("-b", "-B", "-c", "-C", "--orphan"))
            plain = [a for a in rest if not a.startswith("-")]
            if new is not None:
                where.branch = new
            elif len(plain) == 1 and "--" not in rest and not (where.cwd / plain[0]).exists():
                where.branch = plain[0]

    def _push(self, args: list[str], where: _Where) -> None:
        positionals: list[str] = []
        delete = False
        i = 0
        while i < len(args):
            a = args[i]
            if a in ("--repo", "-o", "--push-option", "--receive-pack", "--exec"):
                i += 2
                continue
            if a in ("-f", "--force", "--force-if-includes") or a.startswith("--force-with-lease"):
                raise Refused(f"force pushes (`{a}`) are refused: never rewrite pushed history; merge main into "
                              "your branch instead of rebasing")
            if a in ("--mirror", "--all", "--branches", "--tags", "--prune"):
                raise Refused(f"`git push {a}` is refused: push your own branch by name")
            if a in ("-d", "--delete"):
                delete = True
            elif a.startswith("-") and not a.startswith("--") and len(a) > 1:
                if "f" in a[1:]:
                    raise Refused(f"force pushes (`{a}`) are refused: never rewrite pushed history")
                delete = delete or "d" in a[1:]
            elif not a.startswith("-"):
                positionals.append(a)
            i += 1
        refspecs = positionals[1:]
        if not refspecs:
            refspecs = ["HEAD"]
        for spec in refspecs:
            if spec.startswith("+"):
                raise Refused(f"force pushes (`{spec}`) are refused: never rewrite pushed history")
            if spec == ":" or "*" in spec:
                raise Refused(f"`git push` with `{spec}` pushes many branches, main among them: push your own "
                              "branch by name")
            src, sep, dst = spec.partition(":")
            if delete or (sep and not src):
                gone = _branch(dst if sep else src)
                if not gone.startswith(f"{self.worker_id}/"):
                    raise Refused(f"deleting the branch `{gone}` is refused: you may delete only your own "
                                  f"branches ({self.worker_id}/...)")
                continue
            target = _branch(dst if sep else src)
            if not sep and target in ("HEAD", "@"):
                target = where.branch or self._current_branch(where.cwd)
            elif target in ("HEAD", "@"):
                raise Refused(f"`{spec}` would make a branch named {target} on the forge: name your own branch")
            if target.lower() == "main":
                raise Refused(f"pushing to main (`{spec}`) is refused: main is protected; push your own branch "
                              "and merge it with pr_merge")

    def _current_branch(self, base: Path) -> str:
        """The branch checked out in the clone holding `base` (HEAD read beneath the workdir, bounded, without
        following a link: agensh_ray/confined.py)."""
        try:
            with Confined(self.workdir) as root:
                parts = [p for p in root.relative(base).split("/") if p]
                for n in range(len(parts), -1, -1):
                    head = "/".join([*parts[:n], ".git", "HEAD"])
                    if root.is_file(head):
                        ref = root.read_text(head, 4096, whole=False).strip()
                        return _branch(ref[5:].strip()) if ref.startswith("ref:") else "HEAD"
        except OSError:
            pass
        return "HEAD"


def refusal(reason: str) -> str:
    """The text an agent reads for a refused request."""
    return f"refused by the worker's permission policy: {reason}"
