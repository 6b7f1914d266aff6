"""``make hub``: a JupyterHub for the class on this machine, driven in a real browser.

The hub is started the way an instructor starts it (``make hub`` as root, on
127.0.0.1 with a free port) in a copy of the course, and stopped by its process
group; the system accounts it made for the students are removed afterwards. Students
log in with the password they set at their first login, get a server of their own
running as their own account, and reach neither the Formgrader nor the course's
files; the instructor reaches the Formgrader.
"""

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from servers import free_port, serving
from system_parts import require

from autodiff.grading.sandbox import Cgroup

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts" / "hub"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
KEEP_VENV = ("-o", ".venv/.installed-course", "-o", ".venv/.installed-hub")
COPIED = ("Makefile", "nbgrader_config.py", "pyproject.toml", "environment.yml", "README.md")
FOLDERS = ("autodiff", "course", "solutions", "assignments", "deploy")


def _problem() -> str | None:
    if os.geteuid() != 0:
        return "make hub runs as root (it makes a system account per student)"
    if shutil.which("npm") is None:
        return "npm is not installed (JupyterHub's proxy comes from npm)"
    if shutil.which("useradd") is None:
        return "useradd is not installed"
    return None


class Hub:
    """``make hub`` in a copy of the course, started and stopped as a test needs."""

    def __init__(self, tmp: Path):
        self.tmp, self.course = tmp, tmp / "course"
        self.course.mkdir()
        for name in COPIED:
            shutil.copy(ROOT / name, self.course / name)
        for name in FOLDERS:
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(ROOT / name, self.course / name, ignore=ignore)
        (self.course / ".venv").symlink_to(ROOT / ".venv")
        (self.course / "hub").mkdir()
        (self.course / "hub" / "roster.txt").write_text("alice\nbob  # a comment\n\ncarol\n")
        self.prefix = f"adt{secrets.token_hex(3)}-"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stack = contextlib.ExitStack()

    def start(self) -> None:
        env = dict(os.environ, HUB_ACCOUNT_PREFIX=self.prefix, HUB_MEM_LIMIT="1G")
        env.pop("NBGRADER_EXCHANGE", None)
        command = ["make", *KEEP_VENV, "hub", "INSTRUCTORS=prof", f"PORT={self.port}"]
        log = self.tmp / "hub.log"
        # the proxy answers first (404 for every path), then the hub's /hub/api
        self.stack.enter_context(
            serving(command, self.course, env, self.port, log, 600, "/hub/api", True)
        )

    def stop(self) -> None:
        """Stop the hub, and wait until its proxy has let go of the ports: a new hub
        would otherwise take over the old proxy, which is on its way out."""
        self.stack.close()
        deadline = time.monotonic() + 60
        for port in (self.port, self.port + 1):
            while _listening(port):
                assert time.monotonic() < deadline, f"port {port} still taken after the hub"
                time.sleep(0.2)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def hub():
    require(_problem(), "run as root with: apt install nodejs npm passwd")
    # Not under pytest's folder (0700, root's): students' accounts must pass through.
    tmp = Path(tempfile.mkdtemp(prefix="autodiff-hub-"))
    tmp.chmod(0o711)
    course_hub = Hub(tmp)
    try:
        course_hub.start()
        yield course_hub
    finally:
        course_hub.stop()
        remove_accounts(course_hub.prefix)
        shutil.rmtree(tmp, ignore_errors=True)


def remove_accounts(prefix: str) -> None:
    """The students' servers (they outlive the hub, by design), their accounts and
    their cgroups, all made by this test."""
    for account in [p.pw_name for p in pwd.getpwall() if p.pw_name.startswith(prefix)]:
        for _ in range(100):
            if subprocess.run(["pkill", "-KILL", "-u", account]).returncode == 1:
                break  # no process left
            time.sleep(0.1)
        subprocess.run(["userdel", account], check=True, capture_output=True)
    cgroups = Path("/sys/fs/cgroup")
    for pattern in (f"autodiff-hub-{prefix}*", f"*/autodiff-hub-{prefix}*"):  # v2, v1
        for group in cgroups.glob(pattern):
            group.rmdir()


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    require(None if chromium else "Chromium is not installed", "apt install chromium")
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


def log_in(browser, url: str, name: str, password: str):
    """A browser context of the user's own (cookies apart), at the hub's login form."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_load_state()
    return page


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def as_account(account: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", account, "--", *command], capture_output=True)


def test_a_student_gets_a_server_of_their_own(hub, browser):
    course, url, prefix = hub.course, hub.url, hub.prefix
    page = log_in(browser, url, "alice", "alice-first-password")
    page.wait_for_url("**/user/alice/lab**", timeout=180_000)
    page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
    shot(page, "alice-lab")
    account = pwd.getpwnam(prefix + "alice")
    home = Path(account.pw_dir)
    assert home == course / "hub" / "home" / "alice"
    assert (home.stat().st_uid, home.stat().st_mode & 0o777) == (account.pw_uid, 0o700)
    assert (home / "autodiff-student-kit" / "assignments").is_dir()
    assert not (home / "autodiff-student-kit" / "solutions").exists()
    running = subprocess.run(["pgrep", "-u", account.pw_name, "-f", "jupyterhub-singleuser"])
    assert running.returncode == 0, "alice's server does not run as her account"
    # the Nbgrader menu of a student has the Assignment List and no Formgrader
    page.get_by_role("menuitem", name="Nbgrader").click()
    assert page.get_by_role("menuitem", name="Assignment List").is_visible()
    assert page.get_by_role("menuitem", name="Formgrader").count() == 0
    page.context.close()


def test_a_wrong_password_is_refused(hub, browser):
    url = hub.url
    log_in(browser, url, "bob", "bob-first-password").context.close()  # sets it
    page = log_in(browser, url, "bob", "not-bobs-password")
    assert "/hub/login" in page.url
    assert "Invalid username or password" in page.content()
    page.context.close()
    page = log_in(browser, url, "mallory", "mallory-password")  # not on the roster
    assert "/hub/login" in page.url
    page.context.close()


def test_students_reach_no_course_files_and_no_other_home(hub, browser):
    course, url, prefix = hub.course, hub.url, hub.prefix
    log_in(browser, url, "carol", "carol-first-password").context.close()
    alice = prefix + "alice"
    for secret in (
        course / "solutions" / "a1_numerical_symbolic" / "a1_numerical_symbolic.ipynb",
        course / "gradebook.db",
        course / "hub" / "jupyterhub.sqlite",
        course / "hub" / "roster.txt",
        course / "hub" / "home" / "carol",
    ):
        denied = as_account(alice, "cat" if not secret.name == "carol" else "ls", str(secret))
        assert denied.returncode != 0, f"{alice} can read {secret}"
    exchange = course / "hub" / "exchange"
    assert as_account(alice, "ls", str(exchange)).returncode == 0  # the exchange is shared


def test_the_formgrader_is_the_course_teams(hub, browser):
    url = hub.url
    page = log_in(browser, url, "alice", "alice-first-password")
    answer = page.goto(f"{url}/services/formgrader/formgrader")
    assert answer.status == 403 or "403" in page.content()
    page.context.close()
    page = log_in(browser, url, "prof", "prof-first-password")
    page.goto(f"{url}/services/formgrader/formgrader")
    page.get_by_text("Manage Assignments").first.wait_for(timeout=60_000)
    page.get_by_text("a1_numerical_symbolic").first.wait_for(timeout=60_000)  # the gradebook's
    shot(page, "prof-formgrader")
    page.context.close()


def test_a_server_over_its_memory_limit_is_stopped_alone(hub, browser):
    """bob's notebook takes more than his server's 1 GB: the kernel's OOM killer stops his
    kernel (the biggest process in his cgroup); his server, and alice's, go on."""
    require(None if Cgroup.available() else "no cgroup can be made here", "run as root")
    alice = log_in(browser, hub.url, "alice", "alice-first-password")
    alice.wait_for_url("**/user/alice/lab**", timeout=180_000)
    page = log_in(browser, hub.url, "bob", "bob-first-password")
    page.wait_for_url("**/user/bob/lab**", timeout=180_000)
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    kernel_dialog = page.get_by_role("button", name="Select Kernel")  # asked on some setups
    cell = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    cell.wait_for(timeout=60_000)
    if kernel_dialog.count():
        kernel_dialog.click()
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=120_000)  # connected
    cell.click()
    page.keyboard.type('hog = b"x" * (1536 * 2**20)')
    page.keyboard.press("Shift+Enter")
    try:
        page.get_by_text("appears to have died", exact=False).first.wait_for(timeout=120_000)
    except Exception:
        shot(page, "bob-kernel-not-killed")
        raise
    shot(page, "bob-kernel-killed")
    account = hub.prefix + "bob"
    alive = subprocess.run(["pgrep", "-u", account, "-f", "jupyterhub-singleuser"])
    assert alive.returncode == 0, "bob's server was stopped with his kernel"
    for name, other in (("alice", alice), ("bob", page)):
        answer = other.request.get(f"{hub.url}/user/{name}/api/status")
        assert answer.status == 200, f"{name}'s server no longer answers"
    alice.context.close()
    page.context.close()


def test_the_hub_restarts_without_losing_anything(hub, browser):
    """Stopped and started again: the accounts, passwords, the students' running
    servers and the exchange's content are all still there."""
    exchange = hub.course / "hub" / "exchange"
    marker = exchange / "kept-across-restarts"
    marker.write_text("a file in the exchange")
    alice_server = subprocess.run(
        ["pgrep", "-u", hub.prefix + "alice", "-f", "jupyterhub-singleuser"],
        capture_output=True, text=True,
    )  # fmt: skip
    hub.stop()
    hub.start()
    page = log_in(browser, hub.url, "alice", "alice-first-password")  # her password holds
    page.wait_for_url("**/user/alice/lab**", timeout=180_000)
    page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
    again = subprocess.run(
        ["pgrep", "-u", hub.prefix + "alice", "-f", "jupyterhub-singleuser"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert again.stdout == alice_server.stdout  # the same server, not a new one
    page.context.close()
    page = log_in(browser, hub.url, "bob", "not-bobs-password")
    assert "/hub/login" in page.url  # still refused: the passwords were kept
    page.context.close()
    assert marker.read_text() == "a file in the exchange"
