"""Passwords for the class's JupyterHub: handed out by the course team, guarded against guessing.

JupyterHub's ``FirstUseAuthenticator`` keeps bcrypt hashes in a dbm file and lets a
student change their password at ``/hub/auth/change-password``. It also lets whoever
logs in first as a roster name choose that account's password, so a student could claim
a classmate's account before the classmate did. ``CourseAuthenticator`` keeps the file
and the page, and changes three things:

* an account with no password cannot be claimed: its first password is made by the
  course team (``issue_credentials`` when the hub starts; ``reset_credential``, behind
  ``python -m classroom hub-password NAME``, for a student who forgot theirs);
* failed logins are counted per account and per client address (``Throttle``); past a
  few, further attempts are refused at once, without checking the password, for a delay
  that doubles at each lock;
* bcrypt, slow by design, runs on worker threads, so that one student's guessing does
  not slow the hub for everyone else.
"""

from __future__ import annotations

import asyncio
import dbm
import fcntl
import ipaddress
import math
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
from firstuseauthenticator import FirstUseAuthenticator
from firstuseauthenticator.firstuseauthenticator import CustomLoginHandler, ResetPasswordHandler
from tornado import web
from traitlets import Float, Integer, default

from .hub import roster
from .hub_setup import write_atomically

# Letters and digits that cannot be taken for one another on paper (no 0/o, no 1/l/i).
ALPHABET = "23456789abcdefghjkmnpqrstuvwxyz"
GROUPS, GROUP_LENGTH = 3, 5  # "k7mqx-4pt9w-dah3r": 15 characters, 74 bits
BCRYPT_MAX_BYTES = 72  # bcrypt reads no further, and bcrypt 5 refuses longer passwords
# What a throttle asks a key to wait while checks under way fill its quota: they end in
# a fraction of a second, and their outcome decides whether the key is locked.
SETTLING = 1.0
RIGHT, WRONG, UNCLAIMED = "right", "wrong", "unclaimed"  # what a password check finds


def first_password() -> str:
    """A random first password: three groups of five letters and digits (74 bits).

    Examples
    --------
    >>> password = first_password()  # e.g. "k7mqx-4pt9w-dah3r"
    >>> len(password), password.count("-")
    (17, 2)
    """
    groups = []
    for _ in range(GROUPS):
        groups.append("".join(secrets.choice(ALPHABET) for _ in range(GROUP_LENGTH)))
    return "-".join(groups)


# --- counting failures ------------------------------------------------------------------


@dataclass
class _Tries:
    """What a throttle remembers of one key."""

    failures: int = 0  # within the window that began at ``since``
    checking: int = 0  # attempts admitted whose outcome is not known yet
    since: float = 0.0
    lockouts: int = 0  # locks since the key was last quiet for a whole window
    locked_until: float = 0.0


class Throttle:
    """Failed logins counted per key: an account's name, or a client's address.

    After ``limit`` failures within ``window`` seconds the key is locked: its attempts
    are refused at once for ``lockout`` seconds, twice as long at each lock that follows
    (at most ``max_lockout``) until the key has been quiet for a whole window. At most
    ``capacity`` keys are remembered; past that the least recently tried is forgotten,
    so that random names or addresses cannot grow the table without end.

    Examples
    --------
    >>> accounts = Throttle(limit=2, window=600, lockout=60, max_lockout=900, capacity=100)
    >>> for now in (0, 1):
    ...     wait = accounts.admit("alice", now)  # 0.0: alice may try
    ...     accounts.settle("alice", now, failed=True)
    >>> accounts.admit("alice", 2)  # locked at the second failure, for 60 seconds
    59.0
    """

    def __init__(
        self, limit: int, window: float, lockout: float, max_lockout: float, capacity: int
    ) -> None:
        self.limit, self.window, self.capacity = limit, window, capacity
        self.lockout, self.max_lockout = float(lockout), float(max_lockout)
        self._tries: OrderedDict[str, _Tries] = OrderedDict()  # least recently tried first

    def __len__(self) -> int:
        return len(self._tries)

    def admit(self, key: str, now: float) -> float:
        """Seconds ``key`` must wait before trying again; 0.0 when it may try now, and the
        attempt then counts as under way until ``settle``."""
        tries = self._recall(key, now)
        if tries.locked_until > now:
            return tries.locked_until - now
        # Checks under way count as failures until they end: a student who sends a
        # hundred guesses at once gets no more of them checked than one who waits.
        if tries.failures + tries.checking >= self.limit:
            return SETTLING
        tries.checking += 1
        return 0.0

    def settle(self, key: str, now: float, failed: bool) -> None:
        """An admitted attempt has ended: count it if it ``failed``; lock at the limit."""
        tries = self._tries.get(key)
        if tries is None:  # forgotten meanwhile, to make room
            return
        tries.checking = max(0, tries.checking - 1)
        if not failed:
            return
        if tries.failures == 0:
            tries.since = now
        tries.failures += 1
        if tries.failures >= self.limit:
            delay = self.lockout * 2 ** min(tries.lockouts, 30)
            tries.locked_until = now + min(delay, self.max_lockout)
            tries.lockouts += 1
            tries.failures = 0

    def forget(self, key: str) -> None:
        """Clear the failures and locks of ``key``: its owner has logged in."""
        tries = self._tries.get(key)
        if tries is not None:
            tries.failures = tries.lockouts = 0
            tries.locked_until = 0.0

    def locked_for(self, key: str, now: float) -> float:
        """Seconds left of the lock on ``key`` (0.0 when it is not locked)."""
        tries = self._tries.get(key)
        return max(0.0, tries.locked_until - now) if tries is not None else 0.0

    def _recall(self, key: str, now: float) -> _Tries:
        """The tries of ``key``, made the most recently tried; afresh when it was quiet."""
        tries = self._tries.pop(key, None)
        if tries is None or self._quiet(tries, now):
            tries = _Tries()
        elif tries.failures and now - tries.since > self.window:
            tries.failures = 0  # those were in a window that has ended
        while len(self._tries) >= self.capacity:
            self._tries.popitem(last=False)  # the least recently tried: quiet, most likely
        self._tries[key] = tries
        return tries

    def _quiet(self, tries: _Tries, now: float) -> bool:
        """Nothing under way, and no failure nor lock within the last window."""
        return tries.checking == 0 and now - max(tries.since, tries.locked_until) > self.window


def client_address(request: Any, proxies: frozenset[int] | None = None, hops: int = 1) -> str:
    """Where a login came from, as far as the hub can tell: the key of the per-address limit.

    The hub sits behind configurable-http-proxy on the same machine, so its peer is
    127.0.0.1 and the client is the ``hops``-th entry from the end of X-Forwarded-For:
    each proxy (configurable-http-proxy, and a TLS proxy before it: ``hops=2``) appends
    the address it was reached from; the entries before are the client's own words.
    Tornado's ``request.remote_ip`` is no help: with ``xheaders`` (as JupyterHub runs it)
    it takes a client's X-Real-Ip header, which anyone can write. A process of another
    account on this machine (a student's own server) that reaches the hub without the
    proxy is known by its account (``/proc/net/tcp`` says whose the connection is), not
    by the X-Forwarded-For it wrote; ``proxies`` are the accounts whose connections are
    proxies (the hub's own, which runs configurable-http-proxy).

    IPv6 addresses count by their /64 network, which one home or phone is given whole.
    """
    peer = _ip(_peer_address(request))
    if peer is not None and peer.is_loopback:
        owner = _local_owner(request)
        if owner is not None and owner not in (proxies or {os.getuid()}):
            return f"account {owner} of this machine"
        entries = request.headers.get("X-Forwarded-For", "").split(",")
        forwarded = _ip(entries[-hops]) if len(entries) >= hops else None
        if forwarded is not None:
            peer = forwarded
    if peer is None:
        return "unknown"
    if peer.version == 6:
        return str(ipaddress.ip_network(f"{peer}/64", strict=False))
    return str(peer)


def _local_owner(request: Any) -> int | None:
    """The account whose socket a loopback connection comes from (``/proc/net/tcp``),
    or None where it cannot be found (gone, or not a TCP connection)."""
    address = getattr(getattr(request.connection, "context", None), "address", None)
    if not (isinstance(address, tuple) and len(address) >= 2):
        return None
    ip = _ip(str(address[0]))
    if ip is None:
        return None
    packed = ip.packed
    words = [packed[n : n + 4][::-1].hex().upper() for n in range(0, len(packed), 4)]
    wanted = f"{''.join(words)}:{int(address[1]):04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[1] == wanted:
                return int(fields[7])
    return None


def _pair(account: str, address: str) -> str:
    return f"{account}\n{address}"


def _peer_address(request: Any) -> str:
    """The address the request's TCP connection comes from: tornado keeps it in the
    connection's context, as ``remote_ip`` may have been rewritten from headers."""
    address = getattr(getattr(request.connection, "context", None), "address", None)
    if isinstance(address, tuple) and address:
        return str(address[0])
    return request.remote_ip  # no TCP peer (a Unix socket): the best there is


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # the proxy may write 1.2.3.4 as ::ffff:1.2.3.4
    return address


def _duration(seconds: float) -> str:
    if seconds < 90:
        count = max(1, math.ceil(seconds))
        return f"{count} second{'s' * (count != 1)}"
    return f"{math.ceil(seconds / 60)} minutes"


# --- the authenticator ------------------------------------------------------------------


class ChangePasswordHandler(ResetPasswordHandler):
    """FirstUseAuthenticator's change-password page, with bcrypt on a worker thread."""

    @web.authenticated
    async def post(self) -> None:
        self._register_template_path()  # a POST may come first after the hub restarts
        new_password = self.get_body_argument("password", strip=False)
        message = await self.authenticator.change_password(self.current_user.name, new_password)
        html = await self.render_template(
            "reset.html",
            result=True,
            alert="success" if "success" in message else "danger",
            result_message=message,
        )
        self.finish(html)


class CourseAuthenticator(FirstUseAuthenticator):
    """FirstUseAuthenticator whose accounts open only with a password from the course team,
    with failed logins limited, and bcrypt off the hub's event loop.

    Names the hub knows (``allowed_users`` and ``admin_users``) log in with the password
    stored for them in ``dbm_path``; one with none is refused with a login error that
    sends the student to the course team. ``create_users`` is False and not consulted.
    The counts of failures live in the hub's memory: a restart of the hub clears them.

    Examples
    --------
    In ``jupyterhub_config.py``, with every name the hub knows given a first password::

        c.JupyterHub.authenticator_class = "classroom.hub_auth.CourseAuthenticator"
        c.CourseAuthenticator.dbm_path = str(PRIVATE / "passwords.dbm")
        issue_credentials(names, PRIVATE / "passwords.dbm", PRIVATE / "credentials.csv")
    """

    failures_per_account = Integer(
        5,
        help="Failed logins to one account from one address, within failure_window, that "
        "lock that account for that address (a classmate elsewhere cannot lock it).",
    ).tag(config=True)
    failures_per_account_overall = Integer(
        50, help="Failed logins to one account from anywhere that lock it for everyone."
    ).tag(config=True)
    proxy_hops = Integer(
        1, help="Proxies before the hub that append to X-Forwarded-For (2 behind a TLS proxy)."
    ).tag(config=True)
    failures_per_address = Integer(
        20, help="Failed logins from one client address, within failure_window, that lock it."
    ).tag(config=True)
    failure_window = Float(600.0, help="Seconds over which failures are counted.").tag(config=True)
    lockout = Float(
        60.0, help="Seconds of the first lock; each lock that follows is twice as long."
    ).tag(config=True)
    max_lockout = Float(900.0, help="The longest lock, in seconds.").tag(config=True)
    max_tracked = Integer(
        10_000,
        help="Accounts, and addresses, whose failures are remembered; past it the least "
        "recently tried are forgotten.",
    ).tag(config=True)
    hashing_threads = Integer(
        2, help="Threads that run bcrypt: the CPU cores password checks may take at once."
    ).tag(config=True)

    # Seconds that only go forward, for the limits; tests put a clock of their own here.
    clock = staticmethod(time.monotonic)

    @default("create_users")
    def _only_the_roster(self) -> bool:
        return False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pairs = self._throttle(self.failures_per_account)  # (account, address)
        self._accounts = self._throttle(self.failures_per_account_overall)
        self._addresses = self._throttle(self.failures_per_address)
        self._hashing = ThreadPoolExecutor(self.hashing_threads, thread_name_prefix="bcrypt")

    def _throttle(self, limit: int) -> Throttle:
        window, lockout, longest = self.failure_window, self.lockout, self.max_lockout
        return Throttle(limit, window, lockout, longest, capacity=self.max_tracked)

    async def authenticate(self, handler: Any, data: dict[str, str]) -> str | None:
        """The user's name when ``data`` holds the account's password, else None, with
        ``handler.custom_login_error`` set when there is more to tell the student than
        JupyterHub's "Invalid username or password"."""
        name = self.normalize_username(data["username"])
        address = client_address(handler.request, hops=self.proxy_hops)
        now = self.clock()
        wait = self._addresses.admit(address, now)
        if wait:
            self._refuse(handler, name, address, wait, "from your network address")
            return None
        account = name if self._on_roster(name) else None
        if account is not None:
            for throttle, key in (
                (self._pairs, _pair(account, address)),
                (self._accounts, account),
            ):
                wait = throttle.admit(key, now)
                if wait:
                    self._release(account, address, throttle, now)  # nothing was checked
                    self._refuse(handler, name, address, wait, f"to {name}")
                    return None
        verdict = None
        try:
            verdict = await self._check(account, data["password"])
        finally:
            self._settle(account, address, verdict)  # even when the check broke
        return self._answer(handler, name, address, verdict)

    def _on_roster(self, name: str) -> bool:
        """Whether the hub knows ``name``: only then are its failures worth remembering."""
        return self.allow_all or name in self.allowed_users or name in self.admin_users

    async def _check(self, account: str | None, password: str) -> str:
        if account is None or len(password.encode()) > BCRYPT_MAX_BYTES:
            return WRONG  # no account, or a password no hash can match: nothing to run
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._hashing, self._verify, account, password)

    def _verify(self, account: str, password: str) -> str:
        """On a worker thread: read the account's hash, and let bcrypt judge the password."""
        stored = stored_hash(self.dbm_path, account)
        if stored is None:
            return UNCLAIMED
        return RIGHT if bcrypt.checkpw(password.encode(), stored) else WRONG

    def _settle(self, account: str | None, address: str, verdict: str | None) -> None:
        now = self.clock()
        self._addresses.settle(address, now, failed=verdict in (WRONG, UNCLAIMED))
        if account is not None:
            self._pairs.settle(_pair(account, address), now, failed=verdict == WRONG)
            self._accounts.settle(account, now, failed=verdict == WRONG)
            if verdict == RIGHT:
                self._pairs.forget(_pair(account, address))

    def _release(self, account: str, address: str, refused_by: Throttle, now: float) -> None:
        """Settle, as not failed, what was admitted before ``refused_by`` refused."""
        self._addresses.settle(address, now, failed=False)
        if refused_by is self._accounts:
            self._pairs.settle(_pair(account, address), now, failed=False)

    def _answer(self, handler: Any, name: str, address: str, verdict: str | None) -> str | None:
        if verdict == RIGHT:
            return name
        if verdict == UNCLAIMED:
            handler.custom_login_error = (
                f"{name} has no password yet: ask the course team for your first password."
            )
            return None
        now = self.clock()
        wait = max(
            self._pairs.locked_for(_pair(name, address), now),
            self._accounts.locked_for(name, now),
            self._addresses.locked_for(address, now),
        )
        if wait:
            self.log.warning("Logins as %s from %s locked after failures", name, address)
            handler.custom_login_error = (
                f"Wrong username or password, too many times: try again in {_duration(wait)}."
            )
        return None

    def _refuse(self, handler: Any, name: str, address: str, wait: float, what: str) -> None:
        self.log.debug("Refused a login as %s from %s: locked", name, address)
        handler.custom_login_error = (
            f"Too many failed logins {what}: try again in {_duration(wait)}. If you have "
            "forgotten your password, ask the course team for a new one."
        )

    async def change_password(self, username: str, new_password: str) -> str:
        """``reset_password`` on a worker thread: what the change-password page calls."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._hashing, self.reset_password, username, new_password
        )

    def reset_password(self, username: str, new_password: str) -> str:
        """Store a logged-in student's new password; the message for the page."""
        if len(new_password.encode()) > BCRYPT_MAX_BYTES:
            return f"Password too long! Please choose one of at most {BCRYPT_MAX_BYTES} bytes."
        with _dbm_lock(self.dbm_path):
            return super().reset_password(username, new_password)

    def get_handlers(self, app: Any) -> list[tuple[str, type]]:
        return [
            (r"/login", CustomLoginHandler),
            (r"/auth/change-password", ChangePasswordHandler),
        ]


# --- first passwords, from the course team ----------------------------------------------


def issue_credentials(
    names: Iterable[str], dbm_path: str | Path, credentials_file: str | Path
) -> dict[str, str]:
    """Give each name that has no password a random first password: its bcrypt hash goes
    into the hub's ``dbm_path``, and a ``name,password`` line into ``credentials_file``,
    for the course team to hand out.

    Names that have a password are left alone, so calling it at each start of the hub
    issues only to names new on the roster. The lines are written before the hashes are
    stored: a crash between the two leaves a password on paper that does not work (the
    next call issues another; a name's last line is the one in force), never one that
    works and nobody knows.

    Returns
    -------
    dict[str, str]
        The passwords issued, by name: empty when every name had one.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as private:
    ...     dbm_path, sheet = f"{private}/passwords.dbm", f"{private}/credentials.csv"
    ...     issued = issue_credentials(["alice", "bob"], dbm_path, sheet)
    ...     again = issue_credentials(["alice", "bob"], dbm_path, sheet)
    >>> sorted(issued), again
    (['alice', 'bob'], {})
    """
    wanted = sorted(set(names))
    for name in wanted:
        _check_name(name)
    with _dbm_lock(dbm_path):
        have = names_with_passwords(dbm_path)
        issued = {name: first_password() for name in wanted if name not in have}
        if issued:
            _record(Path(credentials_file), issued)
            _store(dbm_path, issued)
    return issued


def reset_credential(name: str, dbm_path: str | Path, credentials_file: str | Path) -> str:
    """A new first password for ``name`` (a student who forgot theirs), recorded as
    ``issue_credentials`` records one; the old password stops working.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as private:
    ...     dbm_path, sheet = f"{private}/passwords.dbm", f"{private}/credentials.csv"
    ...     password = reset_credential("alice", dbm_path, sheet)  # e.g. "w3hxa-9mcqe-t7bnk"
    ...     works = bcrypt.checkpw(password.encode(), stored_hash(dbm_path, "alice"))
    >>> works
    True
    """
    _check_name(name)
    password = first_password()
    with _dbm_lock(dbm_path):
        _record(Path(credentials_file), {name: password})
        _store(dbm_path, {name: password})
    return password


def stored_hash(dbm_path: str | Path, name: str) -> bytes | None:
    """The bcrypt hash stored for ``name``, or None when it has no password."""
    with _dbm_lock(dbm_path, shared=True):
        if dbm.whichdb(str(dbm_path)) is None:  # no file yet: nobody has a password
            return None
        with dbm.open(str(dbm_path), "r") as db:
            return db.get(name.encode())


def names_with_passwords(dbm_path: str | Path) -> set[str]:
    """The names that have a password in ``dbm_path``."""
    if dbm.whichdb(str(dbm_path)) is None:
        return set()
    with dbm.open(str(dbm_path), "r") as db:
        return {key.decode() if isinstance(key, bytes) else key for key in db.keys()}


def hub_password(name: str, state: Path) -> str:
    """A new first password for ``name`` on the hub whose state folder is ``state``
    (``python -m classroom hub-password NAME``), recorded, as the hub's
    configuration has it, in ``<state>/private/credentials.csv``.

    ``name`` must be on the hub's roster (``$HUB_ROSTER`` or ``<state>/roster.txt``),
    among ``$HUB_INSTRUCTORS`` or ``$HUB_TAS``, or have a password already.
    """
    private = state / "private"
    if not state.is_dir():
        raise SystemExit(
            f"error: no hub state folder at {state}/: start the hub once (make hub), "
            "or name its folder with --state"
        )
    try:
        if name not in _hub_names(state):
            raise SystemExit(
                f"error: {name} is not on the hub's roster ({_roster_file(state)}, "
                "HUB_INSTRUCTORS, HUB_TAS): add them there and restart the hub"
            )
        return reset_credential(name, private / "passwords.dbm", private / "credentials.csv")
    except PermissionError as error:
        raise SystemExit(
            f"error: {error.filename} is the hub's own: run this as the hub runs, as root "
            f"(sudo .venv/bin/python -m classroom hub-password {name})"
        ) from None


def _roster_file(state: Path) -> Path:
    return Path(os.environ.get("HUB_ROSTER", state / "roster.txt"))  # as the hub's config


def _hub_names(state: Path) -> set[str]:
    names = names_with_passwords(state / "private" / "passwords.dbm")
    if _roster_file(state).exists():
        names |= roster(_roster_file(state))
    for variable in ("HUB_INSTRUCTORS", "HUB_TAS"):
        names |= {name for name in os.environ.get(variable, "").split(",") if name}
    return names


def _check_name(name: str) -> None:
    if not name or any(char in name for char in ",\"'") or not name.isprintable():
        raise ValueError(f"{name!r} cannot be a hub name: give names without commas or quotes")
    if any(char.isspace() for char in name):
        raise ValueError(f"{name!r} cannot be a hub name: give names without spaces")
    if name != name.lower():  # its password would be stored under a name nobody logs in as
        raise ValueError(
            f"{name!r} is not a hub name: JupyterHub lowercases the name typed at login, "
            f"so give {name.lower()!r}"
        )


@contextmanager
def _dbm_lock(dbm_path: str | Path, shared: bool = False) -> Iterator[None]:
    """Hold the password file's lock: the hub and the instructor's command may use it at
    once, and dbm files (``dbm.dumb`` among them) do not lock themselves."""
    descriptor = os.open(f"{dbm_path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # which releases the lock


def _store(dbm_path: str | Path, passwords: dict[str, str]) -> None:
    """Store the bcrypt hashes of ``passwords``, hashed two at a time (bcrypt lets go of
    Python's lock while it works: a class of a hundred takes half as long)."""
    salted = [(password.encode(), bcrypt.gensalt()) for password in passwords.values()]
    with ThreadPoolExecutor(2) as pool:
        hashes = list(pool.map(lambda pair: bcrypt.hashpw(*pair), salted))
    with dbm.open(str(dbm_path), "c", 0o600) as db:
        for name, hashed in zip(passwords, hashes, strict=True):
            db[name.encode()] = hashed


def _record(path: Path, passwords: dict[str, str]) -> None:
    """Add ``name,password`` lines to the course team's file, all of them or none.

    The file is written whole beside the old one, synced, and renamed over it: a crash
    leaves the old file or the new one, never half a line. It is 0600, whatever the
    umask: the course team's, never readable by students.
    """
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"  # the last line of a hand-edited file stays a line of its own
    lines = "".join(f"{name},{password}\n" for name, password in passwords.items())
    write_atomically(path, old + lines.encode(), 0o600)
