"""Request bodies as `git http-backend` needs them: a plain file with an exact
length. git sends bodies larger than `http.postBuffer` with
`Transfer-Encoding: chunked` and gzips large fetch negotiations
(`Content-Encoding: gzip`); a CGI program sees neither, so the git HTTP
server de-chunks and inflates here first, into temporary files (a push may
be large), refusing bodies above 2 GiB once inflated.

A caller may set a lower `limit` (the git server does, for pushes): a body
over it is still read to its end, up to 2 GiB, and thrown away, so the
server can answer the client with a message instead of a broken connection;
`TooLarge` then carries the size and the body's first bytes (a push's
commands, to word the refusal)."""

from __future__ import annotations

import os
import tempfile
import zlib
from email.message import Message
from typing import IO

COPY = 64 * 1024
MAX_BODY = 2 * 1024**3
"""Refuse request bodies (after inflation) larger than this: 2 GiB."""


HEAD_BYTES = 64 * 1024
"""How much of a refused body `TooLarge` keeps."""


class BadRequest(Exception):
    pass


class TooLarge(BadRequest):
    """A body over the caller's limit, read to its end and dropped."""

    def __init__(self, size: int, limit: int, head: bytes = b""):
        super().__init__(f"request body of {size} bytes exceeds the limit of {limit} bytes")
        self.size, self.limit, self.head = size, limit, head


def _drain(rfile: IO[bytes], n: int) -> None:
    while n > 0:
        data = rfile.read(min(n, COPY))
        if not data:
            raise BadRequest("connection closed before the end of the body")
        n -= len(data)


def _read_chunked(rfile: IO[bytes], out: IO[bytes], limit: int = MAX_BODY) -> int:
    """Decode an HTTP/1.1 chunked body from `rfile` into `out`; return its length. Past `limit` the rest
    is read and dropped, then TooLarge."""
    total = 0
    while True:
        line = rfile.readline(1024)
        if not line:
            raise BadRequest("connection closed inside a chunked body")
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError as exc:
            raise BadRequest(f"bad chunk size {size_text!r}") from exc
        if size == 0:
            # Trailers (normally none) up to the empty line.
            while True:
                trailer = rfile.readline(8192)
                if trailer in (b"\r\n", b"\n", b""):
                    if total > limit:
                        raise TooLarge(total, limit)
                    return total
        total += size
        if total > MAX_BODY:
            raise BadRequest("request body too large")
        if total > limit:
            _drain(rfile, size)
        else:
            remaining = size
            while remaining:
                data = rfile.read(min(remaining, COPY))
                if not data:
                    raise BadRequest("connection closed inside a chunk")
                out.write(data)
                remaining -= len(data)
        rfile.readline(8)  # the CRLF that ends every chunk


def _read_exact(rfile: IO[bytes], out: IO[bytes], length: int, limit: int = MAX_BODY) -> int:
    if length > MAX_BODY:
        raise BadRequest("request body too large")
    keep = length if length <= limit else min(length, HEAD_BYTES)
    remaining = keep
    while remaining:
        data = rfile.read(min(remaining, COPY))
        if not data:
            raise BadRequest("connection closed before the end of the body")
        out.write(data)
        remaining -= len(data)
    if length > limit:
        _drain(rfile, length - keep)
        raise TooLarge(length, limit)
    return length


def _gunzip(src: IO[bytes], out: IO[bytes]) -> int:
    """Inflate a gzip stream (possibly several members) from `src` into `out`."""
    total = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    while True:
        data = src.read(COPY)
        if not data:
            break
        while data:
            chunk = d.decompress(data)
            total += len(chunk)
            if total > MAX_BODY:
                raise BadRequest("request body too large once inflated")
            out.write(chunk)
            if d.eof:
                data = d.unused_data
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                data = b""
    tail = d.flush()
    out.write(tail)
    return total + len(tail)


def read_body(headers: Message, rfile: IO[bytes], limit: int = MAX_BODY) -> tuple[IO[bytes] | None, int]:
    """The request body as a plain (de-chunked, inflated) temp file, and its length. A body over `limit`
    (as sent) raises TooLarge once it was read."""
    te = headers.get("Transfer-Encoding", "").lower()
    cl = headers.get("Content-Length")
    if "chunked" not in te and cl is None:
        return None, 0
    raw = tempfile.TemporaryFile()
    try:
        try:
            if "chunked" in te:
                _read_chunked(rfile, raw, limit)
            else:
                try:
                    length = int(cl or "0")
                except ValueError as exc:
                    raise BadRequest(f"bad Content-Length {cl!r}") from exc
                _read_exact(rfile, raw, length, limit)
        except TooLarge as exc:
            raw.seek(0)
            raise TooLarge(exc.size, exc.limit, raw.read(HEAD_BYTES)) from None
        raw.seek(0)
        encoding = headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            plain = tempfile.TemporaryFile()
            try:
                _gunzip(raw, plain)
            except zlib.error as exc:
                plain.close()
                raise BadRequest(f"bad gzip body: {exc}") from exc
            except BaseException:
                plain.close()
                raise
            raw.close()
            raw = plain
        elif encoding not in ("", "identity"):
            raise BadRequest(f"unsupported Content-Encoding {encoding!r}")
        size = raw.seek(0, os.SEEK_END)
        raw.seek(0)
        return raw, size
    except BaseException:
        raw.close()
        raise
