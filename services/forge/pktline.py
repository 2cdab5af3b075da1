"""git's pkt-line framing on the push path, as much of it as the git HTTP
server needs to speak for itself: the ref updates at the head of a push
request, the result `git receive-pack` answered (did it unpack? which refs
did it refuse, and what did it say on the progress band?), and a refusal the
server writes itself (a push over the size limit never reaches git).

Why answer in git's framing and not with an HTTP 413: git's HTTP client
shows "RPC failed; HTTP 413" and nothing of the body for a refused POST; a
receive-pack result with the message on the progress band is shown line by
line ("remote: ...") and each ref as "! [remote rejected] ... (reason)".
(Protocol: Documentation/gitprotocol-pack.txt and gitprotocol-common.txt.)"""

from __future__ import annotations

FLUSH = b"0000"
BAND_MAX = {"side-band-64k": 65520, "side-band": 1000}
"""Largest pkt-line (header included) per side-band capability."""


def mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n % 1048576 else f"{n // 1048576} MiB"


def pkt(payload: bytes) -> bytes:
    return b"%04x" % (len(payload) + 4) + payload


def read_pkts(data: bytes) -> tuple[list[bytes | None], int]:
    """The pkt-lines at the start of `data` (None for a flush) and where they end (a partial one stops)."""
    out: list[bytes | None] = []
    pos = 0
    while pos + 4 <= len(data):
        try:
            n = int(data[pos:pos + 4], 16)
        except ValueError:
            break
        if n < 4:  # 0000 flush, 0001 delim, 0002 response-end
            out.append(None)
            pos += 4
            continue
        if pos + n > len(data):
            break
        out.append(data[pos + 4:pos + n])
        pos += n
    return out, pos


def push_commands(head: bytes) -> tuple[list[tuple[str, str, str]], set[str]]:
    """([(old, new, ref)], capabilities) of a push request whose first bytes are `head`."""
    lines, _ = read_pkts(head)
    updates: list[tuple[str, str, str]] = []
    caps: set[str] = set()
    for line in lines:
        if line is None:
            break
        text, _, cap_text = line.rstrip(b"\n").partition(b"\0")
        if cap_text:
            caps = set(cap_text.decode("utf-8", "replace").split())
        parts = text.decode("utf-8", "replace").split(" ")
        if len(parts) == 3 and len(parts[0]) == len(parts[1]) >= 40:
            updates.append((parts[0], parts[1], parts[2]))
    return updates, caps


def refusal(updates: list[tuple[str, str, str]], caps: set[str], message: str, short: str) -> bytes:
    """A receive-pack result refusing every ref of the push: `message` on the progress band (shown as
    "remote: ..."), `short` as the unpack status and each ref's reason."""
    report = pkt(f"unpack {short}\n".encode()) + b"".join(pkt(f"ng {ref} {short}\n".encode()) for _, _, ref in updates)
    report += FLUSH
    band = next((c for c in BAND_MAX if c in caps), None)
    if band is None:
        return report
    out = b"".join(pkt(b"\x02" + line.encode() + b"\n") for line in message.splitlines())
    step = BAND_MAX[band] - 5
    out += b"".join(pkt(b"\x01" + report[i:i + step]) for i in range(0, len(report), step))
    return out + FLUSH


def read_result(data: bytes) -> tuple[str | None, dict[str, str], list[str]]:
    """(unpack status, {refused ref: reason}, progress-band lines) of a receive-pack result."""
    outer, _ = read_pkts(data)
    report, progress = b"", b""
    banded = any(p and p[:1] in (b"\x01", b"\x02", b"\x03") for p in outer)
    for p in outer:
        if not p:
            continue
        if not banded:
            report += pkt(p)
        elif p[:1] == b"\x01":
            report += p[1:]
        else:
            progress += p[1:]
    unpack: str | None = None
    refused: dict[str, str] = {}
    for line in read_pkts(report)[0]:
        if line is None:
            continue
        text = line.decode("utf-8", "replace").rstrip("\n")
        if text.startswith("unpack "):
            unpack = text[len("unpack "):]
        elif text.startswith("ng "):
            ref, _, reason = text[3:].partition(" ")
            refused[ref] = reason
    lines = [s.strip() for s in progress.decode("utf-8", "replace").replace("\r", "\n").split("\n") if s.strip()]
    return unpack, refused, lines


def size_refusal(size: int, limit: int) -> tuple[str, str]:
    """(the reason, for the event log; the message, for the pusher) of a push of `size` bytes over `limit`."""
    reason = (f"this push is {mib(size)} ({size} bytes): pushes are limited to {mib(limit)} ({limit} bytes) "
              "on this forge")
    message = (f"refused: {reason}.\nPush fewer or smaller files (keep large data and build outputs out of "
               "the repository).\nNothing from this push was accepted.")
    return reason, message


def unpack_failure(answer: bytes) -> str | None:
    """Why git refused a push before any hook ran (its objects failed to unpack or to pass fsck), in git's
    words, from receive-pack's answer; None when it unpacked (or the answer cannot be read)."""
    unpack, _refused, lines = read_result(answer)
    if unpack is None or unpack == "ok":
        return None
    said = [line for line in lines if line.startswith(("error:", "fatal:"))]
    return "; ".join(said) if said else f"git could not unpack the push: {unpack}"
