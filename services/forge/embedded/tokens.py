"""The embedded forge's access tokens: made from a key, kept on disk only as
salted hashes.

Why derived, not random: a token is HMAC-SHA256(key, user) (160 bits shown
as 40 hex digits). The key lives outside the forge's files: the run's driver
makes one per run and hands it to the ForgeActor, and Ray gives a restarted
actor the same arguments, so a restarted forge issues every worker the same
token again (the workers' clones keep working) without having stored any.
A forge built without a key draws a random one: its tokens last as long as
its process; after a restart `add_user` issues new ones (`rotate`).

Why a salted SHA-256 and not a slow password hash: the tokens are 160
random-looking bits, not passwords a person picked, so there is no
dictionary to try; the hash only has to make the state file useless to a
reader, and it is checked on every git request (a clone makes several), so it
must be cheap. Comparison is constant-time (`hmac.compare_digest`)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Protocol

from agensh_ray.errors import ForgeError

TOKEN_HEX = 40
"""Characters of a token: 160 bits, the size of Gitea's."""
SALT_BYTES = 16
_USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def new_key() -> bytes:
    """A random key (a forge started without one, or a run's driver)."""
    return secrets.token_bytes(32)


def as_key(key: bytes | str | None) -> bytes:
    """The key as bytes: given (a hex string is decoded), or a new random one for None."""
    if key is None:
        return new_key()
    if isinstance(key, str):
        try:
            key = bytes.fromhex(key)
        except ValueError:
            key = key.encode()
    if len(key) < 16:
        raise ValueError("a forge token key needs at least 16 bytes")
    return key


def derive(key: bytes, user: str) -> str:
    """The token of `user` under `key`."""
    return hmac.new(key, b"agensh-forge-token\0" + user.encode(), hashlib.sha256).hexdigest()[:TOKEN_HEX]


def digest(token: str, salt: str) -> str:
    """What the state keeps: SHA-256 of the salt then the token, hex."""
    return hashlib.sha256(bytes.fromhex(salt) + token.encode()).hexdigest()


def hashed(token: str) -> tuple[str, str]:
    """(salt, digest) for a token: a new salt each time."""
    salt = secrets.token_hex(SALT_BYTES)
    return salt, digest(token, salt)


def matches(token: str, salt: str, expected: str) -> bool:
    """Does `token` hash to `expected` under `salt`? Constant-time in the digest."""
    try:
        got = digest(token, salt)
    except ValueError:  # a malformed salt in the state file
        return False
    return hmac.compare_digest(got.encode(), expected.encode())


class UserStore(Protocol):
    """What Credentials needs of the forge's store (store.ForgeStore)."""

    users: dict[str, tuple[str, str]]
    legacy_tokens: dict[str, str]

    def put_user(self, name: str, salt: str, digest: str) -> None: ...


class Credentials:
    """The forge's users and their tokens: issued from the key, checked against the stored hashes.
    The caller serialises `issue`."""

    def __init__(self, store: UserStore, key: bytes | str | None = None):
        self.store = store
        self._key = as_key(key)

    def issue(self, name: str) -> str:
        """Create a user (idempotent) and return its token. A user whose stored hash does not match the
        token this key makes (a restart with another key) gets that new token; the old one stops working."""
        if not isinstance(name, str) or not _USER_RE.match(name):
            raise ForgeError(
                f"bad user name {name!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
            )
        clash = [u for u in self.store.users if u != name and u.casefold() == name.casefold()]
        if clash:
            raise ForgeError(f"user {name!r} differs from the existing user {clash[0]!r} only in case: "
                             "their branch namespaces would collide; pick another name")
        token = self.token(name)
        if token is None:
            token = derive(self._key, name)
            self.store.put_user(name, *hashed(token))
        return token

    def token(self, user: str) -> str | None:
        """The token of a known user that its stored hash accepts; None if this forge cannot make it."""
        stored = self.store.users.get(user)
        if stored is None:
            return None
        for token in (self.store.legacy_tokens.get(user), derive(self._key, user)):
            if token is not None and matches(token, *stored):
                return token
        return None

    def verify(self, user: str, token: str) -> bool:
        stored = self.store.users.get(user)
        return stored is not None and matches(token, *stored)
