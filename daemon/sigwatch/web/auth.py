"""HTTP basic auth as Prometheus's exporter-toolkit does it: ``basic_auth_users`` maps each user
name to a password *hash*; every path, ``/metrics`` included, needs valid credentials.

exporter-toolkit accepts bcrypt hashes only, and the standard library has no bcrypt. sigwatch
accepts hashes it can verify with ``hashlib`` alone, in the formats passlib writes:

- ``$pbkdf2-sha256$<rounds>$<salt>$<hash>`` (salt and hash in passlib's base64, ``.`` for ``+``
  and no padding); make one with ``python3 -m sigwatch.web.auth`` or, without sigwatch, with the
  one-liner in ``HASH_ONE_LINER``;
- ``$scrypt$ln=<log2 N>,r=<r>,p=<p>$<salt>$<hash>``;
- ``$2a$`` / ``$2b$`` / ``$2y$`` bcrypt hashes copied from an exporter-toolkit web config, when
  the optional ``bcrypt`` package is installed (``pip install 'sigwatch[bcrypt]'``); without it
  such a hash is a configuration error that says so.

A verified (user, password) pair is cached, as exporter-toolkit does, so a scrape every 15 s
does not cost a key derivation each time. An unknown user costs the same derivation as a known
one, and the final comparison of derived keys uses ``hmac.compare_digest``.

Failed authentication work is bounded, so clients guessing passwords cannot starve the scrapes
(a derivation is about 0.2 s of CPU at the default rounds):

- a pair that failed recently fails again without a derivation (a cache of failures);
- each client address may cause ``per_client_burst`` derivations, earning one more every
  ``1 / per_client_rate`` seconds, and all clients together ``global_burst`` and
  ``global_rate``; past that a request is refused at once (429, ``Retry-After``);
- at most ``concurrent`` derivations run at once (one by default: the other workers stay
  free, and a burst of guesses never holds them all);
- a pair accepted recently is answered from the cache, spends no budget and is never
  throttled, so Prometheus keeps scraping while others guess from the same address.

Both caches are keyed by an HMAC of user, password and stored hash under a secret drawn at
start-up: what they hold does not let anyone test passwords faster than the stored hash does.
"""

from __future__ import annotations

import base64
import binascii
import getpass
import hashlib
import hmac
import importlib
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sigwatch.clock import Clock, SystemClock
from sigwatch.errors import SigwatchError

__all__ = [
    "DEFAULT_ROUNDS",
    "HASH_ONE_LINER",
    "AuthBudget",
    "AuthResult",
    "BasicAuth",
    "PasswordHash",
    "PasswordHashError",
    "hash_password",
    "parse_hash",
]

DEFAULT_ROUNDS = 600_000
"""PBKDF2-SHA256 iterations: OWASP's 2023 figure; about 0.4 s once per credential (cached)."""

HASH_ONE_LINER = (
    "python3 -c 'import base64,getpass,hashlib,os;s=os.urandom(16);n=600000;"
    "h=hashlib.pbkdf2_hmac(\"sha256\",getpass.getpass().encode(),s,n);"
    "b=lambda x:base64.b64encode(x).decode().rstrip(\"=\").replace(\"+\",\".\");"
    "print(f\"$pbkdf2-sha256${n}${b(s)}${b(h)}\")'"
)
"""A command that prints a ``pbkdf2-sha256`` hash with nothing but Python's standard library."""

_MAX_ROUNDS = 10_000_000
_MAX_SCRYPT_LN = 20
_MAX_SCRYPT_R = 32
_MAX_SCRYPT_P = 16


class PasswordHashError(SigwatchError, ValueError):
    """A ``basic_auth_users`` entry is not a hash sigwatch can verify."""


def _b64decode(text: str) -> bytes:
    """passlib's base64 (``.`` for ``+``, no padding), also accepting the standard alphabet."""
    std = text.replace(".", "+")
    try:
        return base64.b64decode(std + "=" * (-len(std) % 4), validate=True)
    except (binascii.Error, ValueError):
        msg = f"{text!r} is not base64"
        raise PasswordHashError(msg) from None


def _b64encode(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii").rstrip("=").replace("+", ".")


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """A parsed hash: ``scheme`` is "pbkdf2-sha256", "scrypt" or "bcrypt"."""

    scheme: str
    text: str
    salt: bytes = b""
    digest: bytes = b""
    rounds: int = 0
    scrypt_n: int = 0
    scrypt_r: int = 0
    scrypt_p: int = 0

    def verify(self, password: str) -> bool:
        """Derive from ``password`` and compare in constant time."""
        secret = password.encode("utf-8")
        if self.scheme == "pbkdf2-sha256":
            derived = hashlib.pbkdf2_hmac("sha256", secret, self.salt, self.rounds,
                                          dklen=len(self.digest))
            return hmac.compare_digest(derived, self.digest)
        if self.scheme == "scrypt":
            derived = hashlib.scrypt(secret, salt=self.salt, n=self.scrypt_n, r=self.scrypt_r,
                                     p=self.scrypt_p, dklen=len(self.digest),
                                     maxmem=256 * self.scrypt_r * self.scrypt_n + (1 << 20))
            return hmac.compare_digest(derived, self.digest)
        return bool(_bcrypt().checkpw(secret, self.text.encode("ascii")))


def _bcrypt() -> Any:
    try:
        return importlib.import_module("bcrypt")
    except ImportError:
        msg = ("bcrypt hashes need the optional 'bcrypt' package (pip install "
               "'sigwatch[bcrypt]'); or use a pbkdf2-sha256 hash: python3 -m sigwatch.web.auth")
        raise PasswordHashError(msg) from None


def parse_hash(text: str) -> PasswordHash:
    """Parse one stored hash; raises ``PasswordHashError`` saying what is wrong."""
    parts = text.split("$")
    if text.startswith(("$2a$", "$2b$", "$2y$")):
        _bcrypt()
        if len(text) != 60:
            msg = "a bcrypt hash is 60 characters long"
            raise PasswordHashError(msg)
        return PasswordHash("bcrypt", text)
    if len(parts) == 5 and parts[0] == "" and parts[1] == "pbkdf2-sha256":
        if not parts[2].isdigit() or not 1 <= int(parts[2]) <= _MAX_ROUNDS:
            msg = f"pbkdf2-sha256 rounds must be a number from 1 to {_MAX_ROUNDS}"
            raise PasswordHashError(msg)
        salt, digest = _b64decode(parts[3]), _b64decode(parts[4])
        if len(digest) < 16:
            msg = "the pbkdf2-sha256 hash is too short"
            raise PasswordHashError(msg)
        return PasswordHash("pbkdf2-sha256", text, salt, digest, rounds=int(parts[2]))
    if len(parts) == 5 and parts[0] == "" and parts[1] == "scrypt":
        try:
            params = dict(p.split("=", 1) for p in parts[2].split(","))
            ln, r, p = int(params["ln"]), int(params["r"]), int(params["p"])
        except (KeyError, ValueError):
            msg = "scrypt parameters must read ln=<n>,r=<n>,p=<n>"
            raise PasswordHashError(msg) from None
        if not (1 <= ln <= _MAX_SCRYPT_LN and 1 <= r <= _MAX_SCRYPT_R and 1 <= p <= _MAX_SCRYPT_P):
            msg = (f"scrypt parameters out of range (ln 1-{_MAX_SCRYPT_LN}, r 1-{_MAX_SCRYPT_R}, "
                   f"p 1-{_MAX_SCRYPT_P})")
            raise PasswordHashError(msg)
        salt, digest = _b64decode(parts[3]), _b64decode(parts[4])
        if len(digest) < 16:
            msg = "the scrypt hash is too short"
            raise PasswordHashError(msg)
        return PasswordHash("scrypt", text, salt, digest, scrypt_n=1 << ln, scrypt_r=r,
                            scrypt_p=p)
    msg = ("not a supported password hash: use $pbkdf2-sha256$..., $scrypt$... or a bcrypt "
           "hash (make one with: python3 -m sigwatch.web.auth)")
    raise PasswordHashError(msg)


def hash_password(password: str, *, rounds: int = DEFAULT_ROUNDS, salt: bytes | None = None) -> str:
    """A ``$pbkdf2-sha256$`` hash of ``password`` (random 16-byte salt unless given)."""
    salt = os.urandom(16) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, rounds)
    return f"$pbkdf2-sha256${rounds}${_b64encode(salt)}${_b64encode(digest)}"


@dataclass(frozen=True, slots=True)
class AuthBudget:
    """How much key-derivation work failed or unknown credentials may cause."""

    per_client_burst: int = 5
    per_client_rate: float = 1 / 6  # derivations per second earned back (10 a minute)
    global_burst: int = 4
    global_rate: float = 2.0  # at most about 0.4 of a core at the default rounds
    concurrent: int = 1  # derivations at once: the other workers stay free for requests
    failure_ttl: float = 600.0  # seconds a failed pair fails again for free
    cache_size: int = 1024  # accepted and failed pairs remembered (each)
    clients: int = 4096  # client addresses whose budget is remembered


@dataclass(frozen=True, slots=True)
class AuthResult:
    """The user name when accepted; ``throttled`` when refused without checking (429)."""

    user: str | None
    throttled: bool = False
    retry_after: int = 0


class _Bucket:
    """A token bucket: ``burst`` tokens, one earned back every ``1 / rate`` seconds."""

    __slots__ = ("at", "tokens")

    def __init__(self, burst: float, now: float) -> None:
        self.tokens = burst
        self.at = now

    def peek(self, now: float, burst: float, rate: float) -> bool:
        """Whether ``take`` would succeed now (nothing is spent)."""
        return min(burst, self.tokens + (now - self.at) * rate) >= 1

    def take(self, now: float, burst: float, rate: float) -> bool:
        self.tokens = min(burst, self.tokens + (now - self.at) * rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class BasicAuth:
    """Checks ``Authorization: Basic`` headers against ``basic_auth_users``."""

    def __init__(self, users: Mapping[str, str], realm: str = "sigwatch", *,
                 budget: AuthBudget | None = None, clock: Clock | None = None) -> None:
        """Raises ``PasswordHashError`` naming every user whose hash cannot be used."""
        if not users:
            msg = "basic_auth_users is empty"
            raise PasswordHashError(msg)
        parsed: dict[str, PasswordHash] = {}
        errors: list[str] = []
        for user, text in users.items():
            if ":" in user:
                errors.append(f"{user!r}: a user name cannot contain ':'")
                continue
            try:
                parsed[user] = parse_hash(text)
            except PasswordHashError as exc:
                errors.append(f"{user!r}: {exc}")
        if errors:
            raise PasswordHashError("basic_auth_users: " + "; ".join(errors))
        self._users = parsed
        self._decoy = next(iter(parsed.values()))
        self.realm = realm
        self.budget = budget or AuthBudget()
        self._clock = clock or SystemClock()
        self._secret = os.urandom(32)
        self._accepted: OrderedDict[bytes, None] = OrderedDict()
        self._failed: OrderedDict[bytes, float] = OrderedDict()  # key -> when it failed
        self._clients: OrderedDict[str, _Bucket] = OrderedDict()
        self._global = _Bucket(self.budget.global_burst, self._clock.monotonic())
        self._deriving = 0  # derivations running now (under the lock)
        self._lock = threading.Lock()

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value sent with a 401."""
        return f'Basic realm="{self.realm}", charset="UTF-8"'

    def check(self, header: str | None) -> str | None:
        """The user name when ``header`` carries valid credentials, else None."""
        return self.authenticate(header, "").user

    def _key(self, user: str, password: str, stored: PasswordHash | None) -> bytes:
        return hmac.new(self._secret, b"\0".join(
            (user.encode(), password.encode(), (stored or self._decoy).text.encode(),
             b"known" if stored is not None else b"unknown")), hashlib.sha256).digest()

    def precheck(self, header: str | None, client: str) -> AuthResult | None:
        """The answer when it needs no key derivation (no credentials, a pair that failed
        recently, a client or the server over its budget), else None; spends nothing.

        The HTTP server's I/O loop calls it before handing the request to a worker, so guesses
        past the budget never occupy one. A pair accepted recently is None too: the worker
        answers it from the cache, as every request that is let through is authenticated.
        """
        creds = _parse_basic(header)
        if creds is None:
            return AuthResult(None)
        user, password = creds
        key = self._key(user, password, self._users.get(user))
        now = self._clock.monotonic()
        b = self.budget
        with self._lock:
            if key in self._accepted:
                return None
            failed_at = self._failed.get(key)
            if failed_at is not None and now - failed_at < b.failure_ttl:
                return AuthResult(None)
            bucket = self._clients.get(client)
            if bucket is not None and not bucket.peek(now, b.per_client_burst,
                                                      b.per_client_rate):
                return AuthResult(None, throttled=True,
                                  retry_after=max(1, round(1 / b.per_client_rate)))
            if (not self._global.peek(now, b.global_burst, b.global_rate)
                    or self._deriving >= b.concurrent):
                return AuthResult(None, throttled=True,
                                  retry_after=max(1, round(1 / b.global_rate)))
        return None

    def authenticate(self, header: str | None, client: str) -> AuthResult:
        """Check ``header`` for the client at address ``client`` within the budget."""
        creds = _parse_basic(header)
        if creds is None:
            return AuthResult(None)
        user, password = creds
        stored = self._users.get(user)
        key = self._key(user, password, stored)
        now = self._clock.monotonic()
        b = self.budget
        with self._lock:
            if key in self._accepted:
                self._accepted.move_to_end(key)
                return AuthResult(user)
            failed_at = self._failed.get(key)
            if failed_at is not None and now - failed_at < b.failure_ttl:
                return AuthResult(None)
            bucket = self._clients.get(client)
            if bucket is None:
                bucket = self._clients[client] = _Bucket(b.per_client_burst, now)
                if len(self._clients) > b.clients:
                    self._clients.popitem(last=False)
            else:
                self._clients.move_to_end(client)
            if not bucket.take(now, b.per_client_burst, b.per_client_rate):
                return AuthResult(None, throttled=True,
                                  retry_after=max(1, round(1 / b.per_client_rate)))
            if not self._global.take(now, b.global_burst, b.global_rate):
                bucket.tokens += 1  # not this client's fault
                return AuthResult(None, throttled=True,
                                  retry_after=max(1, round(1 / b.global_rate)))
            if self._deriving >= b.concurrent:
                bucket.tokens += 1
                self._global.tokens += 1
                return AuthResult(None, throttled=True, retry_after=1)
            self._deriving += 1
        # The derivation, outside the lock; an unknown user costs the same as a known one.
        try:
            ok = (stored or self._decoy).verify(password) and stored is not None
        finally:
            with self._lock:
                self._deriving -= 1
        with self._lock:
            if ok:
                self._accepted[key] = None
                if len(self._accepted) > b.cache_size:
                    self._accepted.popitem(last=False)
                return AuthResult(user)
            self._failed[key] = now
            self._failed.move_to_end(key)
            if len(self._failed) > b.cache_size:
                self._failed.popitem(last=False)
        return AuthResult(None)


def _parse_basic(header: str | None) -> tuple[str, str] | None:
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def main() -> int:
    """``python3 -m sigwatch.web.auth``: prompt for a password, print its hash for the config."""
    first = getpass.getpass("password: ")
    if not first:
        sys.stderr.write("empty password\n")
        return 2
    if getpass.getpass("again: ") != first:
        sys.stderr.write("the passwords differ\n")
        return 2
    sys.stdout.write(hash_password(first) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
