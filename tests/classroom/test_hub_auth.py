"""The hub's passwords (classroom/hub_auth.py), as a hostile student meets them:
accounts that cannot be claimed, failed logins limited per account and per address,
bcrypt off the event loop, first passwords issued once and recorded whole. No hub is
started: the authenticator is called as JupyterHub's login page calls it."""

import asyncio
import csv
import dbm
import os
import random
import stat
import time
from types import SimpleNamespace

import bcrypt
import pytest
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application, RequestHandler

from classroom import hub_auth
from classroom.__main__ import main
from classroom.hub_auth import (
    ALPHABET,
    GROUP_LENGTH,
    GROUPS,
    CourseAuthenticator,
    client_address,
    issue_credentials,
    reset_credential,
    stored_hash,
)

STUDENTS = {f"s{n:02}" for n in range(10)}
ROSTER = STUDENTS | {"alice", "bob", "carol"}
STUDENT_ADDRESS = "203.0.113.7"  # the address the proxy saw the student come from
SLOW_SALT = bcrypt.gensalt  # bcrypt's own cost, before the tests make it cheap


class Clock:
    """A clock the tests move by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def login_page(client=STUDENT_ADDRESS, forwarded_by_client=None, real_ip=None):
    """The login page's handler as JupyterHub gets it behind configurable-http-proxy: the
    TCP peer is the proxy (127.0.0.1), which appended the client's address to whatever
    X-Forwarded-For the client sent; tornado (xheaders on) rewrote remote_ip from them."""
    forwarded = f"{forwarded_by_client}, {client}" if forwarded_by_client else client
    headers = {"X-Forwarded-For": forwarded}
    if real_ip:
        headers["X-Real-Ip"] = real_ip
    request = SimpleNamespace(
        connection=SimpleNamespace(context=SimpleNamespace(address=("127.0.0.1", 50123))),
        headers=headers,
        remote_ip=real_ip or client,  # as tornado's _apply_xheaders leaves it
    )
    return SimpleNamespace(request=request, custom_login_error="")


def login(auth, name, password, **where):
    """What a login from the page gives: the user's name or None, and the page's error."""
    page = login_page(**where)
    data = {"username": name, "password": password}
    return asyncio.run(auth.authenticate(page, data)), page.custom_login_error


@pytest.fixture(autouse=True)
def cheap_bcrypt(monkeypatch):
    """bcrypt at its lowest cost: the tests check logic, not bcrypt's slowness."""
    monkeypatch.setattr(bcrypt, "gensalt", lambda rounds=4, prefix=b"2b": SLOW_SALT(4, prefix))


@pytest.fixture
def bcrypt_calls(monkeypatch):
    """How many passwords bcrypt was asked to check."""
    calls = []
    real = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda *args: calls.append(1) or real(*args))
    return calls


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def paths(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    return SimpleNamespace(dbm=str(private / "passwords.dbm"), sheet=private / "credentials.csv")


@pytest.fixture
def issued(paths):
    """First passwords for everyone on the roster but carol."""
    return issue_credentials(ROSTER - {"carol"}, paths.dbm, paths.sheet)


@pytest.fixture
def auth(paths, clock, issued):
    authenticator = CourseAuthenticator(dbm_path=paths.dbm, allowed_users=set(ROSTER))
    authenticator.clock = clock
    return authenticator


# --- who may log in ---------------------------------------------------------------------


def test_an_account_without_a_password_cannot_be_claimed(auth, paths):
    for password in ["carols-own-password", "12345678", "a much longer passphrase"]:
        user, error = login(auth, "carol", password)
        assert user is None, f"carol, never given a password, logged in as {user!r}: claimed"
        assert "ask the course team" in error, f"the page said {error!r}, not who to ask"
    assert stored_hash(paths.dbm, "carol") is None, "a login stored a password for carol"
    user, _ = login(auth, "carol", "carols-own-password")
    assert user is None, f"carol's first try became her password: logged in as {user!r}"
    assert auth.create_users is False, f"create_users is {auth.create_users}, expected False"


def test_an_issued_first_password_opens_its_account(auth, issued):
    user, error = login(auth, "alice", issued["alice"])
    assert user == "alice", f"alice's issued password gave {user!r} ({error!r}), not 'alice'"
    user, _ = login(auth, "ALICE", issued["alice"])
    assert user == "alice", f"'ALICE' (normalized) gave {user!r}, not 'alice'"


def test_a_wrong_password_or_an_unknown_name_is_refused(auth, issued):
    user, error = login(auth, "alice", issued["bob"])
    assert user is None, f"bob's password opened alice's account: {user!r}"
    assert error == "", f"a plain wrong password said {error!r}; expected JupyterHub's own"
    user, _ = login(auth, "mallory", issued["bob"])
    assert user is None, f"a name not on the roster logged in: {user!r}"
    user, _ = login(auth, "alice", issued["alice"] + "x" * 80)  # past bcrypt's 72 bytes
    assert user is None, f"a password past 72 bytes logged in: {user!r}"


# --- failed logins, limited -------------------------------------------------------------


def test_past_the_limit_from_one_address_the_right_password_waits_unchecked(
    auth, issued, bcrypt_calls
):
    """Five wrong passwords for alice from one address lock alice there (unchecked:
    no bcrypt while locked); alice herself, elsewhere, still gets in: a classmate
    cannot lock her out."""
    for n in range(5):
        login(auth, "alice", f"guess-{n}", client="198.51.100.7")
    assert len(bcrypt_calls) == 5, f"bcrypt checked {len(bcrypt_calls)} guesses, expected 5"
    user, error = login(auth, "alice", issued["alice"], client="198.51.100.7")
    assert user is None, f"the right password got in past the limit: {user!r}"
    assert "try again in 60 seconds" in error, f"the page said {error!r}, not the wait"
    assert len(bcrypt_calls) == 5, f"bcrypt ran while locked: {len(bcrypt_calls)} calls, not 5"
    user, error = login(auth, "alice", issued["alice"], client="203.0.113.99")
    assert user == "alice", f"alice, from her own address, was locked out: {error!r}"


def test_guesses_from_many_addresses_lock_the_account_for_everyone(auth, issued):
    """Fifty wrong passwords for alice from fifty addresses (each under its own
    limits): alice is locked from anywhere, so spreading guesses does not help."""
    for n in range(50):
        login(auth, "alice", f"guess-{n}", client=f"198.51.{n // 200}.{n % 200 + 1}")
    user, error = login(auth, "alice", issued["alice"], client="203.0.113.99")
    assert user is None and "try again in" in error, f"got {user!r}, {error!r}"


def test_a_local_account_is_known_by_its_account_not_its_headers(auth, issued, monkeypatch):
    """A student's process on the hub's machine reaching the hub without the proxy,
    writing any X-Forwarded-For: her tries count against her account, so forging
    addresses does not escape the per-address limit; the proxy's (the hub's own
    account's) connections are judged by the address it appended."""
    monkeypatch.setattr(hub_auth, "_local_owner", lambda request: 12345)
    for n in range(20):
        login(auth, f"s0{n % 10}", f"guess-{n}", client=f"10.0.{n}.1")
    user, error = login(auth, "alice", issued["alice"], client="10.0.99.1")
    assert user is None and "network address" in error, f"got {user!r}, {error!r}"
    page = login_page(client="10.0.99.1")
    assert client_address(page.request) == "account 12345 of this machine"
    monkeypatch.setattr(hub_auth, "_local_owner", lambda request: os.getuid())
    assert client_address(page.request) == "10.0.99.1"


def test_the_local_owner_of_a_real_connection_is_found():
    """``/proc/net/tcp`` names the account of a loopback connection's other end."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    try:
        peer = SimpleNamespace(address=client.getsockname())
        request = SimpleNamespace(connection=SimpleNamespace(context=peer))
        assert hub_auth._local_owner(request) == os.getuid()
    finally:
        client.close()
        server.close()


def test_a_successful_login_clears_the_accounts_failures(auth, issued):
    for n in range(4):
        login(auth, "alice", f"typo-{n}")
    assert login(auth, "alice", issued["alice"])[0] == "alice", "alice's login failed"
    for n in range(4):
        login(auth, "alice", f"typo-again-{n}")
    user, error = login(auth, "alice", issued["alice"])
    assert user == "alice", f"4 + 4 failures with a login between locked alice: {error!r}"


def test_the_lock_expires_and_each_next_lock_is_longer(auth, issued, clock):
    for lock, seconds in enumerate([60, 120, 240]):
        for n in range(5):
            login(auth, "alice", f"guess-{lock}-{n}")
        clock.now += seconds - 1
        user, error = login(auth, "alice", issued["alice"])
        assert user is None, f"lock {lock + 1} let alice in after {seconds - 1} s of {seconds}"
        clock.now += 2
        user, error = login(auth, "bob", issued["bob"])  # another account is not locked
        assert user == "bob", f"bob was refused while alice was locked: {error!r}"
    user, error = login(auth, "alice", issued["alice"])
    assert user == "alice", f"the third lock did not expire after 240 s: {error!r}"


def test_the_address_limit_spans_accounts(auth, issued, bcrypt_calls):
    names = sorted(STUDENTS)  # four guesses each: under every account's limit
    for n in range(20):
        login(auth, names[n % len(names)], f"guess-{n}")
    user, error = login(auth, "alice", issued["alice"])
    assert user is None, f"the 21st try from one address got in: {user!r}"
    assert "from your network address" in error, f"the page said {error!r}"
    assert len(bcrypt_calls) == 20, f"bcrypt ran {len(bcrypt_calls)} times, expected 20"
    user, error = login(auth, "alice", issued["alice"], client="198.51.100.1")
    assert user == "alice", f"alice, from another address, was refused: {error!r}"


def test_forged_headers_do_not_escape_the_address_limit(auth, issued):
    for n in range(20):
        login(auth, "mallory", f"guess-{n}")
    for n in range(5):
        forged = f"10.9.{n}.{n}"
        user, error = login(
            auth, "alice", issued["alice"], real_ip=forged, forwarded_by_client=forged
        )
        assert user is None and "network address" in error, (
            f"X-Real-Ip and X-Forwarded-For {forged} got {user!r}, {error!r}: expected the "
            "address's lock"
        )


def test_the_address_is_the_proxys_last_entry_in_a_real_tornado_server():
    async def ask():
        class Echo(RequestHandler):
            def get(self):
                self.write(f"{client_address(self.request)} {self.request.remote_ip}")

        [sock] = bind_sockets(0, "127.0.0.1")
        server = HTTPServer(Application([("/", Echo)]), xheaders=True)  # as JupyterHub
        server.add_sockets([sock])
        headers = {"X-Real-Ip": "10.6.6.6", "X-Forwarded-For": "10.7.7.7, 203.0.113.7"}
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        response = await AsyncHTTPClient().fetch(url, headers=headers)
        server.stop()
        return response.body.decode().split()

    address, remote_ip = asyncio.run(ask())
    assert remote_ip == "10.6.6.6", f"tornado's remote_ip is {remote_ip}: the test is moot"
    assert address == "203.0.113.7", f"client_address gave {address}, expected 203.0.113.7"


def test_addresses_from_elsewhere_and_ipv6():
    request = login_page().request
    request.connection.context.address = ("192.0.2.5", 40000)  # not from the proxy
    assert client_address(request) == "192.0.2.5", f"got {client_address(request)}"
    a, b = (login_page(client=f"2001:db8:1:2::{n}").request for n in (1, 2))
    assert client_address(a) == client_address(b) == "2001:db8:1:2::/64", (
        f"two addresses of one /64 gave {client_address(a)} and {client_address(b)}"
    )


@pytest.mark.parametrize("addresses, checked", [(1, 5), (100, 50)])
def test_many_guesses_at_once_get_no_more_checks(auth, issued, bcrypt_calls, addresses, checked):
    """100 guesses sent at once: from one address, no more are checked than the
    account's limit there (5); from a hundred, no more than its limit overall (50)."""

    async def flood():
        pages = [login_page(client=f"198.51.100.{n % addresses + 1}") for n in range(100)]
        tries = [{"username": "alice", "password": f"guess-{n}"} for n in range(100)]
        return await asyncio.gather(*map(auth.authenticate, pages, tries))

    users = asyncio.run(flood())
    assert users == [None] * 100, f"a guess got in: {set(users)}"
    assert len(bcrypt_calls) <= checked, (
        f"100 guesses at once from {addresses} addresses had {len(bcrypt_calls)} checked,"
        f" not {checked}"
    )


def test_counts_stay_bounded_under_random_names_and_addresses(paths, monkeypatch):
    # the proxy's connections, as login_page makes them: not looked up 100,000 times
    monkeypatch.setattr(hub_auth, "_local_owner", lambda request: None)
    random_names = [f"x{random.getrandbits(64):x}" for _ in range(100_000)]
    roster = set(random_names)  # names the hub knows: each has failures worth counting
    auth = CourseAuthenticator(dbm_path=paths.dbm, allowed_users=roster, max_tracked=1000)

    async def flood():
        for name in random_names:
            client = f"10.{random.getrandbits(8)}.{random.getrandbits(8)}.{random.getrandbits(8)}"
            data = {"username": name, "password": "p" * 80}  # past 72 bytes: no bcrypt
            await auth.authenticate(login_page(client=client), data)

    asyncio.run(flood())
    held = {  # what it remembers
        "accounts": len(auth._accounts),
        "addresses": len(auth._addresses),
        "accounts at addresses": len(auth._pairs),
    }
    assert max(held.values()) <= 1000, f"after 100,000 random tries it holds {held}"


# --- bcrypt off the event loop ----------------------------------------------------------


@pytest.mark.parametrize("action", ["login", "change password"])
def test_bcrypt_does_not_block_the_event_loop(auth, paths, monkeypatch, action):
    monkeypatch.setattr(bcrypt, "gensalt", SLOW_SALT)  # bcrypt's real cost: about 0.2 s
    with dbm.open(paths.dbm, "w") as db:
        db[b"alice"] = bcrypt.hashpw(b"right-password", SLOW_SALT())

    async def while_checking():
        ticks = 0
        done = False

        async def tick():
            nonlocal ticks
            while not done:
                await asyncio.sleep(0.005)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0)  # the ticker starts before the check
        if action == "login":
            data = {"username": "alice", "password": "wrong-password"}
            await auth.authenticate(login_page(), data)
        else:
            await auth.change_password("alice", "a-new-password")
        done = True
        await ticker
        return ticks

    started = time.perf_counter()
    ticks = asyncio.run(while_checking())
    seconds = time.perf_counter() - started
    assert ticks >= 5, f"the loop ticked {ticks} times in {seconds:.2f} s of bcrypt: blocked"


# --- first passwords ----------------------------------------------------------------------


def read_sheet(path):
    """The credentials file: its lines, each checked whole, and the password in force by
    name (a name's last line)."""
    text = path.read_text()
    assert text.endswith("\n"), f"the file ends in half a line: {text[-30:]!r}"
    rows = list(csv.reader(text.splitlines()))
    for row in rows:
        assert len(row) == 2 and row[0] and row[1], f"a line is not name,password: {row}"
    return rows, dict(rows)


def test_issue_credentials_is_idempotent_private_and_whole(paths):
    names = ["alice", "bob", "s01"]
    issued = issue_credentials(names, paths.dbm, paths.sheet)
    assert sorted(issued) == names, f"issued to {sorted(issued)}, expected {names}"
    sheet_before = paths.sheet.read_bytes()
    again = issue_credentials(names, paths.dbm, paths.sheet)
    assert again == {}, f"a second call issued {again}, expected nothing"
    assert paths.sheet.read_bytes() == sheet_before, "a second call changed the file"
    rows, in_force = read_sheet(paths.sheet)
    assert in_force == issued and len(rows) == 3, f"the file holds {rows}, expected {issued}"
    for name, password in issued.items():
        groups = password.split("-")
        assert [len(g) for g in groups] == [GROUP_LENGTH] * GROUPS, f"{password!r}'s shape"
        assert set("".join(groups)) <= set(ALPHABET), f"{password!r} leaves the alphabet"
        assert bcrypt.checkpw(password.encode(), stored_hash(paths.dbm, name)), name
    assert len(ALPHABET) ** (GROUPS * GROUP_LENGTH) >= 2**60, "first passwords under 60 bits"
    for path in paths.sheet.parent.iterdir():
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path.name} is {oct(mode)}: readable by others"


@pytest.mark.parametrize("name", ["", "ann,bob", "ann bob", 'ann"', "Ann"])
def test_names_that_would_break_a_line_or_never_log_in_are_refused(paths, name):
    with pytest.raises(ValueError, match="hub name"):
        issue_credentials([name], paths.dbm, paths.sheet)
    assert not paths.sheet.exists(), f"{name!r} was refused, but a line was written"


def test_the_credentials_file_is_0600_whatever_was_there(paths):
    paths.sheet.write_text("old,line-without-newline")
    paths.sheet.chmod(0o644)
    old_umask = os.umask(0)
    try:
        issued = issue_credentials(["alice"], paths.dbm, paths.sheet)
    finally:
        os.umask(old_umask)
    mode = stat.S_IMODE(paths.sheet.stat().st_mode)
    assert mode == 0o600, f"the credentials file is {oct(mode)}, expected 0o600"
    rows, _ = read_sheet(paths.sheet)
    assert rows == [["old", "line-without-newline"], ["alice", issued["alice"]]], rows


def test_a_crash_while_recording_leaves_the_old_file_and_no_password(paths, monkeypatch):
    issue_credentials(["alice"], paths.dbm, paths.sheet)
    before = paths.sheet.read_bytes()

    def crash(*args):
        raise OSError("the machine went down")

    monkeypatch.setattr(hub_auth.os, "replace", crash)
    with pytest.raises(OSError):
        issue_credentials(["bob"], paths.dbm, paths.sheet)
    monkeypatch.undo()
    assert paths.sheet.read_bytes() == before, "a crash left a changed credentials file"
    assert stored_hash(paths.dbm, "bob") is None, "bob's password works, but is on no paper"


def test_a_crash_before_storing_leaves_a_line_and_the_next_call_reissues(paths, monkeypatch):
    monkeypatch.setattr(hub_auth, "_store", lambda *args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        issue_credentials(["alice"], paths.dbm, paths.sheet)
    monkeypatch.undo()
    issued = issue_credentials(["alice"], paths.dbm, paths.sheet)
    assert list(issued) == ["alice"], f"the next call issued {issued}, expected alice's"
    rows, in_force = read_sheet(paths.sheet)
    assert len(rows) == 2 and in_force["alice"] == issued["alice"], (
        f"the file holds {rows}; expected two lines for alice, the last in force"
    )


def test_reset_credential_replaces_a_forgotten_password(auth, paths, issued):
    new = reset_credential("alice", paths.dbm, paths.sheet)
    assert login(auth, "alice", new)[0] == "alice", "the reset password does not work"
    assert login(auth, "alice", issued["alice"])[0] is None, "the old password still works"
    _, in_force = read_sheet(paths.sheet)
    assert in_force["alice"] == new, f"the file's last line for alice is {in_force['alice']}"


def test_a_changed_password_works_and_the_old_one_does_not(auth, issued):
    message = asyncio.run(auth.change_password("alice", "alices-own-secret"))
    assert "success" in message, f"changing the password said {message!r}"
    assert login(auth, "alice", "alices-own-secret")[0] == "alice", "the new one is refused"
    assert login(auth, "alice", issued["alice"])[0] is None, "the old password still works"
    for bad in ["short", "x" * 73]:
        message = asyncio.run(auth.change_password("alice", bad))
        assert "success" not in message, f"{bad!r} was taken: {message!r}"
    assert login(auth, "alice", "alices-own-secret")[0] == "alice", "a refused change stuck"


# --- the instructor's command -------------------------------------------------------------


def test_hub_password_resets_one_account_of_the_roster(tmp_path, capsys, monkeypatch):
    for variable in ("HUB_ROSTER", "HUB_INSTRUCTORS", "HUB_TAS"):
        monkeypatch.delenv(variable, raising=False)
    state = tmp_path / "hub"
    with pytest.raises(SystemExit, match="no hub state folder"):
        main(["hub-password", "alice", "--state", str(state)])
    (state / "private").mkdir(parents=True)
    (state / "roster.txt").write_text("alice\nbob  # late joiner\n")
    with pytest.raises(SystemExit, match="not on the hub's roster"):
        main(["hub-password", "mallory", "--state", str(state)])
    assert main(["hub-password", "bob", "--state", str(state)]) == 0
    printed = capsys.readouterr().out
    _, in_force = read_sheet(state / "private" / "credentials.csv")
    assert in_force["bob"] in printed, f"printed {printed!r}, not bob's new {in_force['bob']}"
    stored = stored_hash(state / "private" / "passwords.dbm", "bob")
    assert bcrypt.checkpw(in_force["bob"].encode(), stored), "the printed password is not stored"
