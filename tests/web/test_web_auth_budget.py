"""Failed authentication work is bounded: a wrong password costs a key derivation (about 0.2 s
of CPU at the default rounds) only within a per-client and a global budget, and a credential
that failed recently fails again for free. A credential accepted recently costs nothing and is
never throttled, so a scraper keeps answering while others guess. Before: every wrong guess
cost a full derivation, and 24 guessing clients kept both cores busy."""

from __future__ import annotations

import base64
import threading

import pytest
from support.web import basic

from sigwatch.clock import FakeClock
from sigwatch.web.auth import AuthBudget, BasicAuth, PasswordHash, hash_password

FAST = 1000


def _header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture(name="derivations")
def _derivations(monkeypatch) -> list[str]:
    """Every key derivation made (the costly step), by password tried."""
    made: list[str] = []
    real = PasswordHash.verify

    def counting(self: PasswordHash, password: str) -> bool:
        made.append(password)
        return real(self, password)

    monkeypatch.setattr(PasswordHash, "verify", counting)
    return made


def _auth(clock: FakeClock, **budget: float) -> BasicAuth:
    return BasicAuth({"prometheus": hash_password("s3cret", rounds=FAST)},
                     budget=AuthBudget(**budget), clock=clock)  # type: ignore[arg-type]


class TestBudget:
    def test_a_repeated_wrong_password_costs_one_derivation(self, derivations) -> None:
        auth = _auth(FakeClock())

        results = [auth.authenticate(_header("prometheus", "guess"), "10.0.0.9").user
                   for _ in range(20)]

        assert [None] * 20 == results
        assert ["guess"] == derivations

    def test_a_client_over_its_budget_is_throttled_without_a_derivation(
            self, derivations) -> None:
        clock = FakeClock()
        auth = _auth(clock, per_client_burst=3, per_client_rate=0.1)

        outcomes = [auth.authenticate(_header("prometheus", f"guess{n}"), "10.0.0.9").throttled
                    for n in range(6)]
        other = auth.authenticate(_header("prometheus", "guess-from-elsewhere"), "10.0.0.7")
        clock.advance(10)  # one more derivation earned
        later = auth.authenticate(_header("prometheus", "guess-later"), "10.0.0.9")

        assert [False, False, False, True, True, True] == outcomes
        assert (False, False) == (other.throttled, later.throttled)
        assert 5 == len(derivations)

    def test_the_global_budget_bounds_many_clients(self, derivations) -> None:
        auth = _auth(FakeClock(), global_burst=4, global_rate=1.0)

        throttled = [auth.authenticate(_header("prometheus", f"g{n}"), f"10.0.1.{n}").throttled
                     for n in range(10)]

        assert [False] * 4 + [True] * 6 == throttled
        assert 4 == len(derivations)

    def test_an_accepted_credential_is_never_throttled_and_costs_nothing(
            self, derivations) -> None:
        auth = _auth(FakeClock(), per_client_burst=1, per_client_rate=0.001, global_burst=1,
                     global_rate=0.001)
        assert "prometheus" == auth.authenticate(_header("prometheus", "s3cret"), "10.0.0.9").user
        for n in range(5):  # the budget is spent by guesses from the same address
            auth.authenticate(_header("prometheus", f"guess{n}"), "10.0.0.9")

        again = [auth.authenticate(_header("prometheus", "s3cret"), "10.0.0.9").user
                 for _ in range(5)]

        assert ["prometheus"] * 5 == again
        assert ["s3cret"] == derivations

    def test_unknown_users_spend_the_budget_too(self, derivations) -> None:
        auth = _auth(FakeClock(), per_client_burst=2, per_client_rate=0.001)

        throttled = [auth.authenticate(_header(f"user{n}", "pw"), "10.0.0.9").throttled
                     for n in range(4)]

        assert [False, False, True, True] == throttled

    def test_cached_keys_do_not_hold_a_fast_hash_of_the_password(self) -> None:
        """The caches are keyed by an HMAC with a secret made at start-up, not a plain hash
        that a memory dump would let one brute-force quickly."""
        first = _auth(FakeClock())
        second = _auth(FakeClock())
        first.authenticate(_header("prometheus", "s3cret"), "a")
        second.authenticate(_header("prometheus", "s3cret"), "a")

        assert set(first._accepted) != set(second._accepted)


class TestConcurrency:
    def test_one_derivation_at_a_time_others_are_throttled(self, monkeypatch) -> None:
        """While one derivation runs, another uncached credential is refused at once instead
        of holding a second worker (and core)."""
        started, release = threading.Event(), threading.Event()
        real = PasswordHash.verify

        def slow(self: PasswordHash, password: str) -> bool:
            started.set()
            release.wait(10)
            return real(self, password)

        monkeypatch.setattr(PasswordHash, "verify", slow)
        auth = _auth(FakeClock())
        first = threading.Thread(target=auth.authenticate,
                                 args=(_header("prometheus", "a"), "10.0.0.1"))
        first.start()
        assert started.wait(10)
        second = auth.authenticate(_header("prometheus", "s3cret"), "10.0.0.2")
        release.set()
        first.join(10)
        third = auth.authenticate(_header("prometheus", "s3cret"), "10.0.0.2")

        assert (True, "prometheus") == (second.throttled, third.user)


class TestOverHTTP:
    def test_a_throttled_client_gets_429_with_retry_after(self, serve) -> None:
        auth = BasicAuth({"prometheus": hash_password("s3cret", rounds=FAST)},
                         budget=AuthBudget(per_client_burst=1, per_client_rate=0.001))
        s = serve(auth=auth)

        first = s.get("/metrics", headers=basic("prometheus", "a"))
        second = s.get("/metrics", headers=basic("prometheus", "b"))

        assert (401, 429) == (first.status, second.status)
        assert "retry-after" in second.headers


class TestRefusedBeforeAWorker:
    def test_guesses_and_anonymous_requests_are_answered_while_every_worker_is_busy(
            self, serve) -> None:
        """One worker, no queue, held by an authenticated request: a request without
        credentials gets its 401, and a guess past the budget its 429, from the I/O loop
        (before: they waited for a worker, or got 503 and held a slot that scrapes needed)."""
        from sigwatch.web.request import text_response
        from sigwatch.web.server import ServerLimits

        auth = BasicAuth({"prometheus": hash_password("s3cret", rounds=FAST)},
                         budget=AuthBudget(per_client_burst=2, per_client_rate=0.001))
        s = serve(auth=auth, limits=ServerLimits(workers=1, queue=0))
        entered, release = threading.Event(), threading.Event()

        def hold(_request):  # noqa: ANN001, ANN202
            entered.set()
            release.wait(30)
            return text_response(200, "released\n")

        s.app.add_route("/hold", hold)
        assert 200 == s.get("/metrics", headers=basic("prometheus", "s3cret")).status
        assert 401 == s.get("/metrics", headers=basic("prometheus", "guess-1")).status
        holder = threading.Thread(
            target=s.get, args=("/hold",), kwargs={"headers": basic("prometheus", "s3cret")})
        holder.start()
        try:
            assert entered.wait(10)
            anonymous = s.get("/metrics").status
            guess = s.get("/metrics", headers=basic("prometheus", "guess-2"))
            again = s.get("/metrics", headers=basic("prometheus", "guess-1")).status
        finally:
            release.set()
            holder.join(10)

        assert (401, 429, 401) == (anonymous, guess.status, again)
        assert "retry-after" in guess.headers
        assert "content-security-policy" in guess.headers
