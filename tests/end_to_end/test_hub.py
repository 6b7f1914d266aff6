"""``make hub``: a JupyterHub for the class on this machine, driven in a real browser.

The hub is started the way an instructor starts it (``make hub`` as root, on
127.0.0.1 with a free port) in a copy of the course, and stopped by its process
group; the system accounts it made for the students are removed afterwards. Students
log in with the password they set at their first login, get a server of their own
running as their own account, and reach neither the Formgrader nor the course's
files; the instructor reaches the Formgrader.
"""

import contextlib
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from lab_pages import (
    Timer,
    answers_for,
    assignment_list,
    autograde_each,
    fetch,
    formgrader_result,
    read_feedback,
    return_feedback,
    score,
    submit,
)
from servers import free_port, serving
from system_parts import chromium, require

from classroom.exchange import owner
from classroom.sandbox import Cgroup

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "hub"
ASSIGNMENT = "a1_numerical_symbolic"
# Who answers what: all of it, part A (finite differences, 5 points), nothing.
CLASS = {"alice": None, "bob": {"finite_differences", "complex_step"}, "carol": set()}
# The load check: these 17 through the hub's REST API, the three above in the browser.
LOAD_STUDENTS = [f"load{n:02d}" for n in range(1, 18)]
LOAD_ASSIGNMENT = "a2_forward_mode"
KEEP_VENV = ("-o", ".venv/.installed-course", "-o", ".venv/.installed-hub")
COPIED = ("Makefile", "nbgrader_config.py", "pyproject.toml", "environment.yml", "README.md")
FOLDERS = ("autodiff", "classroom", "course", "solutions", "assignments", "deploy")


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
        roster = ["alice", "bob  # a comment", "", "carol", *LOAD_STUDENTS]
        (self.course / "hub" / "roster.txt").write_text("\n".join(roster) + "\n")
        self.prefix = f"adt{secrets.token_hex(3)}-"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stack = contextlib.ExitStack()

    def start(self, *settings: str) -> None:
        """``make hub`` with the test's limits, and ``settings`` (``NAME=value``)."""
        limits = {
            "HUB_MEM_LIMIT": "1G", "HUB_CPU_LIMIT": "0.5", "HUB_DISK_MB": "64",
            "HUB_POLL_SECONDS": "5",
        }  # fmt: skip
        accounts = {"HUB_ACCOUNT_PREFIX": self.prefix, "HUB_GRADER": self.prefix + "grader"}
        env = dict(os.environ, **accounts, **limits)
        env.pop("NBGRADER_EXCHANGE", None)
        command = ["make", *KEEP_VENV, "hub", "INSTRUCTORS=prof", f"PORT={self.port}", *settings]
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


def password(name: str) -> str:
    """The first password the hub gave ``name``, from the credentials file the course
    team hands out (``<state>/private/credentials.csv``; a name's last line holds)."""
    lines = (RUNNING[0].course / "hub" / "private" / "credentials.csv").read_text()
    given = dict(line.split(",", 1) for line in lines.splitlines() if "," in line)
    return given[name]


RUNNING: list[Hub] = []  # the module's hub, for password()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def hub():
    require(_problem(), "run as root with: apt install nodejs npm passwd")
    # Not under pytest's folder (0700, root's): students' accounts must pass through.
    # Not under /tmp either: each student's server has a /tmp of its own.
    tmp = Path(tempfile.mkdtemp(prefix="autodiff-hub-", dir="/var/tmp"))
    tmp.chmod(0o711)
    course_hub = Hub(tmp)
    RUNNING[:] = [course_hub]
    try:
        course_hub.start()
        yield course_hub
    finally:
        course_hub.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)  # the hub's log, for a failure
        shutil.copy(tmp / "hub.log", ARTIFACTS / "hub.log")
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
    yield from chromium()


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
    began = time.monotonic()
    page = log_in(browser, url, "alice", password("alice"))
    page.wait_for_url("**/user/alice/lab**", timeout=180_000)
    page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
    first_start = {"alice: first login to JupyterLab open s": round(time.monotonic() - began, 1)}
    shot(page, "alice-lab")
    (ARTIFACTS / "first-start.json").write_text(json.dumps(first_start))  # for the note
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
    log_in(browser, url, "bob", password("bob")).context.close()  # sets it
    page = log_in(browser, url, "bob", "not-bobs-password")
    assert "/hub/login" in page.url
    assert "Invalid username or password" in page.content()
    page.context.close()
    page = log_in(browser, url, "mallory", "mallory-password")  # not on the roster
    assert "/hub/login" in page.url
    page.context.close()


def test_students_reach_no_course_files_and_no_other_home(hub, browser):
    course, url, prefix = hub.course, hub.url, hub.prefix
    log_in(browser, url, "carol", password("carol")).context.close()
    alice = prefix + "alice"
    for secret in (
        course / "solutions" / "a1_numerical_symbolic" / "a1_numerical_symbolic.ipynb",
        course / "grading" / "gradebook.db",  # the grading account's, on a hub
        course / "hub" / "private" / "jupyterhub.sqlite",
        course / "hub" / "private",  # the passwords, the cookie secret
        course / "hub" / "roster.txt",
        course / "hub" / "home" / "carol",
    ):
        denied = as_account(alice, "ls" if secret.is_dir() else "cat", str(secret))
        assert denied.returncode != 0, f"{alice} can read {secret}"
    exchange = course / "hub" / "exchange"
    assert as_account(alice, "ls", str(exchange)).returncode == 0  # the exchange is shared


def test_the_formgrader_is_the_course_teams(hub, browser):
    url = hub.url
    page = log_in(browser, url, "alice", password("alice"))
    answer = page.goto(f"{url}/services/formgrader/formgrader")
    assert answer.status == 403 or "403" in page.content()
    page.context.close()
    page = log_in(browser, url, "prof", password("prof"))
    page.goto(f"{url}/services/formgrader/formgrader")
    page.get_by_text("Manage Assignments").first.wait_for(timeout=60_000)
    page.get_by_text("a1_numerical_symbolic").first.wait_for(timeout=60_000)  # the gradebook's
    shot(page, "prof-formgrader")
    page.context.close()


def save_answers(page, url: str, student: str, only: set[str] | None) -> None:
    """The student's answers (``answers_for``) saved as JupyterLab saves: a PUT to
    their server's contents API, with their login cookie and the XSRF token."""
    base, path = f"{url}/user/{student}", f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    fetched = page.request.get(f"{base}/api/contents/{path}")
    assert fetched.ok, f"{student} cannot open the fetched notebook: {fetched.status}"
    filled = answers_for(nbformat.from_dict(fetched.json()["content"]), ASSIGNMENT, only)
    xsrf = next(c["value"] for c in page.context.cookies(f"{base}/") if c["name"] == "_xsrf")
    saved = page.request.put(
        f"{base}/api/contents/{path}",
        data={"type": "notebook", "content": filled},
        headers={"X-XSRFToken": xsrf},
    )
    assert saved.ok, f"{student}'s save: {saved.status} {saved.text()}"


def open_formgrader(browser, url: str):
    prof = log_in(browser, url, "prof", password("prof"))
    prof.on("dialog", lambda dialog: dialog.accept())  # the Formgrader's confirms
    prof.goto(f"{url}/services/formgrader/formgrader")
    prof.locator("tr", has_text=ASSIGNMENT).wait_for(timeout=60_000)
    return prof


def scores_in_formgrader(prof, url: str) -> dict[str, str]:
    """The scores of the assignment's submissions, as the Formgrader lists them."""
    prof.goto(f"{url}/services/formgrader/formgrader/manage_submissions/{ASSIGNMENT}")
    table = prof.locator("#main-table")
    for student in CLASS:
        table.locator("tr", has_text=student).wait_for(timeout=60_000)
    cells = {s: table.locator("tr", has_text=s).locator("td.score") for s in CLASS}
    return {student: " ".join(cell.inner_text().split()) for student, cell in cells.items()}


def test_a_week_of_the_class_on_the_hub(hub, browser):
    """prof releases in the Formgrader; alice (all), bob (part A) and carol (nothing)
    each fetch, answer and submit from their own Assignment List; prof collects,
    autogrades and returns the feedback in the Formgrader; each student reads their
    own score, and reaches no one else's server, home or submission."""
    url, exchange = hub.url, hub.course / "hub" / "exchange" / "autodiff"
    timer = Timer()
    with contextlib.ExitStack() as stack:
        stack.callback(timer.save, ARTIFACTS / "timings.json")  # also when a step fails
        with timer("prof: log in, open the Formgrader"):
            prof = open_formgrader(browser, url)
        # make hub built the kit from the release, and published nothing: that is prof's
        assert not (exchange / "outbound" / ASSIGNMENT).exists()
        with timer("prof: release (Formgrader)"):
            prof.locator("tr", has_text=ASSIGNMENT).locator("td.release a").click()
            formgrader_result(prof)
        assert (exchange / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()

        pages = {}
        for student, only in CLASS.items():
            with timer(f"{student}: log in, JupyterLab open"):
                page = pages[student] = log_in(browser, url, student, password(student))
                page.wait_for_url(f"**/user/{student}/lab**", timeout=180_000)
                page.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
            with timer(f"{student}: fetch"):
                assignment_list(page)
                fetch(page, ASSIGNMENT)
            if only != set():
                save_answers(page, url, student, only)
            with timer(f"{student}: submit"):
                submit(page, ASSIGNMENT)
            shot(page, f"week-1-{student}-submitted")
        made_by = {
            entry.name.split("+")[0]: owner(entry) for entry in (exchange / "inbound").iterdir()
        }
        assert made_by == {student: hub.prefix + student for student in CLASS}

        # carol, in a terminal of hers, submits a blank notebook under alice's id
        kit = hub.course / "hub" / "home" / "carol" / "autodiff-student-kit"
        nbgrader = hub.course / "hub" / "venv" / "bin" / "nbgrader"
        as_alice = f"cd {kit} && {nbgrader} submit {ASSIGNMENT} --CourseDirectory.student_id=alice"
        env = [f"HOME={kit.parent}", f"NBGRADER_EXCHANGE={exchange.parent}"]
        spoofed = as_account(hub.prefix + "carol", "env", *env, "sh", "-c", as_alice)
        assert spoofed.returncode == 0, spoofed.stderr.decode()

        with timer("prof: collect (Formgrader)"):
            prof.goto(f"{url}/services/formgrader/formgrader")
            prof.locator("tr", has_text=ASSIGNMENT).locator("td.collect a").click()
            formgrader_result(prof)
        for student in CLASS:
            notebook = hub.course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
            assert notebook.is_file(), f"{student}'s submission was not collected"
        (report,) = (hub.course / "grading").glob(f"collect-{ASSIGNMENT}-*.csv")
        refused = f"made by the account {hub.prefix}carol, not by {hub.prefix}alice"
        assert refused in report.read_text(), report.read_text()
        autograde_each(prof, ASSIGNMENT, CLASS, timer)
        scores = scores_in_formgrader(prof, url)
        shot(prof, "week-2-formgrader-autograded")
        assert scores == {"alice": "20 / 25", "bob": "5 / 25", "carol": "0 / 25"}, scores
        with timer("prof: generate and release feedback (Formgrader)"):
            prof.goto(f"{url}/services/formgrader/formgrader")
            return_feedback(prof, ASSIGNMENT)

        for student, page in pages.items():
            with timer(f"{student}: fetch and read feedback"):
                shown = read_feedback(page)
            shot(page, f"week-3-{student}-feedback")
            points = scores[student].split(" / ")[0] + ".0"
            assert score(shown) == (points, "25.0"), f"{student} was shown {score(shown)}"

        sizes = {  # for docs/instructors/scaling.md
            "submission KB": {
                e.name.split("+")[0]: _kb(e) for e in (exchange / "inbound").iterdir()
            },
            "feedback KB": {p.name: _kb(p) for p in (exchange / "feedback").iterdir()},
            "home KB": {s: _kb(hub.course / "hub" / "home" / s) for s in CLASS},
        }
        (ARTIFACTS / "sizes.json").write_text(json.dumps(sizes, indent=2))

        # Nobody reaches another's server, home, feedback or submission.
        alice = pages["alice"]
        answer = alice.goto(f"{url}/user/bob/api/contents/{ASSIGNMENT}")
        assert answer.status == 403, f"alice reached bob's server: {answer.status}"
        bob_home = hub.course / "hub" / "home" / "bob"
        for folder in (bob_home, exchange / "inbound", exchange / "feedback"):
            listed = as_account(hub.prefix + "alice", "ls", str(folder))
            assert listed.returncode != 0, f"alice can list {folder}"
        for page in (prof, *pages.values()):
            page.context.close()


def _kb(path: Path) -> int:
    """KB on disk of a file or a folder (``du -sk``)."""
    return int(
        subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True).stdout.split()[0]
    )


def test_a_server_over_its_memory_limit_is_stopped_alone(hub, browser):
    """bob's notebook takes more than his server's 1 GB: the kernel's OOM killer stops his
    kernel (the biggest process in his cgroup), and his cell says so; his server, and
    alice's, go on."""
    require(None if Cgroup.available() else "no cgroup can be made here", "run as root")
    alice = log_in(browser, hub.url, "alice", password("alice"))
    alice.wait_for_url("**/user/alice/lab**", timeout=180_000)
    page = log_in(browser, hub.url, "bob", password("bob"))
    page.wait_for_url("**/user/bob/lab**", timeout=180_000)
    page.goto(
        f"{hub.url}/user/bob/lab?reset"
    )  # a fresh workspace: the Launcher, not last week's tabs
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
    told = page.locator(".jp-OutputArea-output").get_by_text(
        "the notebook used more than 1 GB of memory, the limit", exact=False
    )
    try:
        told.first.wait_for(timeout=30_000)
    finally:
        shot(page, "bob-kernel-killed")
    account = hub.prefix + "bob"
    for folder in Cgroup.existing(f"autodiff-hub-{account}").folders:  # bob's alone
        seen = as_account(hub.prefix + "alice", "ls", str(folder))
        assert seen.returncode != 0, f"alice reads bob's cgroup {folder}: {seen.stdout}"
    alive = subprocess.run(["pgrep", "-u", account, "-f", "jupyterhub-singleuser"])
    assert alive.returncode == 0, "bob's server was stopped with his kernel"
    for name, other in (("alice", alice), ("bob", page)):
        answer = other.request.get(f"{hub.url}/user/{name}/api/status")
        assert answer.status == 200, f"{name}'s server no longer answers"
    alice.context.close()
    page.context.close()


def test_a_servers_cpu_is_capped(hub, browser):
    """alice's server runs in a cgroup of its own with half a core (HUB_CPU_LIMIT=0.5):
    two busy loops of her account started in it get half a core between them, on a
    machine where they would otherwise take two."""
    account = hub.prefix + "alice"
    log_in(browser, hub.url, "alice", password("alice")).context.close()
    server = subprocess.run(
        ["pgrep", "-u", account, "-f", "jupyterhub-singleuser"], capture_output=True, text=True
    ).stdout.split()
    assert server, "alice's server is not running"
    cgroups = Path(f"/proc/{server[0]}/cgroup").read_text()
    assert f"autodiff-hub-{account}" in cgroups, f"alice's server is not in her cgroup:\n{cgroups}"
    name = f"autodiff-hub-{account}"
    capped = [  # v1's cpu hierarchy, or v2's one
        folder / name
        for folder in (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup"))
        if (folder / name / "cpu.cfs_quota_us").exists() or (folder / name / "cpu.max").exists()
    ]
    problem = None if capped else "this kernel's cgroups have no cpu controller"
    require(problem, "cgroup v1's cpu hierarchy, or v2 with +cpu in cgroup.subtree_control")
    procs = capped[0] / "cgroup.procs"
    loops = [
        subprocess.Popen(
            ["runuser", "-u", account, "--", "python3", "-c", "while True: pass"],
            preexec_fn=lambda: procs.write_text("0"),
        )
        for _ in range(2)
    ]
    try:
        started = time.monotonic()
        time.sleep(4)
        used = sum(_cpu_seconds(loop.pid) for loop in loops)
        wall = time.monotonic() - started
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    assert used < 0.5 * wall * 1.25, f"busy loops used {used:.1f} s of CPU in {wall:.1f} s"


def _cpu_seconds(pid: int) -> float:
    """User and system time of a process and of its children (runuser's child)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sum(_process_cpu(task) for task in [pid, *map(int, children)])


def _process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class HubAPI:
    """The hub's REST API and the students' servers, with a token (urllib, threads)."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def call(self, method: str, path: str, body: dict | None = None, token: str = ""):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"token {token or self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=120) as answer:
            text = answer.read()
            return json.loads(text) if text else {}


def admin_token(browser, url: str) -> str:
    """A token for prof (an admin), made as the hub's token page makes one."""
    page = log_in(browser, url, "prof", password("prof"))
    xsrf = next(c["value"] for c in page.context.cookies(f"{url}/hub/") if c["name"] == "_xsrf")
    made = page.request.post(
        f"{url}/hub/api/users/prof/tokens",
        data={"note": "load check", "expires_in": 3600},
        headers={"X-XSRFToken": xsrf},
    )
    assert made.ok, f"no token for prof: {made.status} {made.text()}"
    token = made.json()["token"]
    page.context.close()
    return token


def simulated_student(api: HubAPI, name: str) -> dict:
    """Start the student's server, then fetch and submit through the Assignment List's
    own handlers (what its buttons call). Returns the times, or the error."""
    times: dict = {"student": name}
    try:
        began = time.monotonic()
        api.call("POST", f"/hub/api/users/{name}/server", {})
        while not api.call("GET", f"/hub/api/users/{name}")["servers"].get("", {}).get("ready"):
            assert time.monotonic() - began < 180, "not ready after 180 s"
            time.sleep(0.25)
        times["server start s"] = round(time.monotonic() - began, 2)
        token = api.call("POST", f"/hub/api/users/{name}/tokens", {"expires_in": 3600})["token"]
        body = {"course_id": "autodiff", "assignment_id": LOAD_ASSIGNMENT}
        began = time.monotonic()
        fetched = api.call("POST", f"/user/{name}/assignments/fetch", body, token)
        assert fetched.get("success"), f"fetch said {fetched}"
        submitted = api.call("POST", f"/user/{name}/assignments/submit", body, token)
        listed = {(a["assignment_id"], a["status"]) for a in submitted.get("value", [])}
        assert (LOAD_ASSIGNMENT, "submitted") in listed, f"submit said {submitted}"
        times["fetch and submit s"] = round(time.monotonic() - began, 2)
    except Exception as error:  # reported, and failed on below
        times["error"] = f"{type(error).__name__}: {str(error)[:500]}"
    times["done at"] = time.monotonic()
    return times


def usage_of(account: str) -> tuple[float, float]:
    """(MB of memory (proportional set size), seconds of CPU) of an account's processes."""
    pids = subprocess.run(["pgrep", "-u", account], capture_output=True, text=True).stdout
    pss_kb, cpu = 0, 0.0
    for pid in map(int, pids.split()):
        with contextlib.suppress(OSError):
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            pss_kb += int(next(line for line in rollup if line.startswith("Pss:")).split()[1])
            cpu += _process_cpu(pid)
    return pss_kb / 1024, cpu


def test_twenty_students_fetch_and_submit_at_once(hub, browser):
    """The load check: prof releases a2; 17 students through the hub's REST API (each
    server started, then the Assignment List's fetch and submit) and the three of the
    week in their browsers, all at once. Every submission arrives, made by its
    student's account; the times and memory go to tests/artifacts/hub/load.json."""
    url, exchange = hub.url, hub.course / "hub" / "exchange" / "autodiff"
    prof = open_formgrader(browser, url)
    prof.locator("tr", has_text=LOAD_ASSIGNMENT).locator("td.release a").click()
    formgrader_result(prof)
    prof.context.close()
    api = HubAPI(url, admin_token(browser, url))
    pages = {}
    for student in CLASS:  # logged in and their JupyterLab open, before the clock starts
        pages[student] = log_in(browser, url, student, password(student))
        pages[student].wait_for_selector("#jp-main-dock-panel", timeout=180_000)
    started = time.monotonic()
    with ThreadPoolExecutor(len(LOAD_STUDENTS)) as pool:
        running = [pool.submit(simulated_student, api, name) for name in LOAD_STUDENTS]
        for student, page in pages.items():
            began = time.monotonic()
            assignment_list(page)
            fetch(page, LOAD_ASSIGNMENT)
            submit(page, LOAD_ASSIGNMENT)
            done = {"student": student, "fetch and submit s": round(time.monotonic() - began, 2)}
            running.append(_done(dict(done, **{"done at": time.monotonic()})))
        results = [future.result() for future in running]
    for result in results:
        result["done at"] = round(result["done at"] - started, 2)
    usage = {account: usage_of(hub.prefix + account) for account in [*CLASS, *LOAD_STUDENTS]}
    figures = {
        "students": len(results),
        "all submitted after s": max(r["done at"] for r in results),
        "server start s (REST students)": sorted(r.get("server start s", -1) for r in results[:17]),
        "memory MB per student (PSS, server and kernels)": {
            k: round(v[0], 1) for k, v in usage.items()
        },
        "CPU s per student so far": {k: round(v[1], 1) for k, v in usage.items()},
        "results": results,
    }
    (ARTIFACTS / "load.json").write_text(json.dumps(figures, indent=2))
    for page in pages.values():
        page.context.close()
    errors = [r for r in results if "error" in r]
    assert not errors, errors
    made_by = {}
    for entry in (exchange / "inbound").iterdir():
        student, assignment = entry.name.split("+")[:2]
        if assignment == LOAD_ASSIGNMENT:
            made_by[student] = owner(entry)
    assert made_by == {s: hub.prefix + s for s in [*CLASS, *LOAD_STUDENTS]}


def _done(result: dict):
    """A finished step, as a future holds it (the browser's, beside the threads')."""
    future: Future = Future()
    future.set_result(result)
    return future


def test_the_hub_restarts_without_losing_anything(hub, browser):
    """Stopped and started again: the accounts, passwords, the students' running
    servers, the exchange's submissions, the gradebook's scores and the feedback are
    all still there (after the week above)."""
    exchange = hub.course / "hub" / "exchange"
    marker = exchange / "kept-across-restarts"
    marker.write_text("a file in the exchange")
    inbound = sorted(p.name for p in (exchange / "autodiff" / "inbound").iterdir())
    feedback = sorted((hub.course / "hub" / "home").glob(f"*/*/{ASSIGNMENT}/feedback/*/*.html"))
    prof = open_formgrader(browser, hub.url)
    scores = scores_in_formgrader(prof, hub.url)
    prof.context.close()
    alice_server = subprocess.run(
        ["pgrep", "-u", hub.prefix + "alice", "-f", "jupyterhub-singleuser"],
        capture_output=True, text=True,
    )  # fmt: skip
    hub.stop()
    hub.start()
    page = log_in(browser, hub.url, "alice", password("alice"))  # her password holds
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
    assert sorted(p.name for p in (exchange / "autodiff" / "inbound").iterdir()) == inbound
    assert len(feedback) == len(CLASS)
    assert all(path.is_file() for path in feedback)
    prof = open_formgrader(browser, hub.url)
    assert scores_in_formgrader(prof, hub.url) == scores  # the gradebook, through the new hub
    prof.context.close()


# --- a hostile student with a terminal (each test failed on the hub before) ----------


def test_an_account_on_the_roster_cannot_be_claimed(hub, browser):
    """mallory logs in as a classmate who has not logged in yet, with a password of her
    choice: refused (the first password is the course team's to hand out), and the
    classmate's own still works."""
    page = log_in(browser, hub.url, "load05", "mallorys-choice-1")
    assert "/hub/login" in page.url, f"a roster name was claimed: {page.url}"
    assert "Invalid username or password" in page.content()
    page.context.close()
    page = log_in(browser, hub.url, "load05", password("load05"))
    assert "/hub/login" not in page.url, "the classmate's own password was refused"
    page.context.close()


def test_guessing_a_password_locks_the_account_not_the_hub(hub, browser):
    """Five wrong passwords for load17: the right one is refused too for a while, with
    a message that says so; the hub goes on answering everyone else."""
    for guess in range(5):
        log_in(browser, hub.url, "load17", f"guess-number-{guess}").context.close()
    page = log_in(browser, hub.url, "load17", password("load17"))
    assert "/hub/login" in page.url, "the account was not locked after five guesses"
    assert "Too many failed logins" in page.content()
    page.context.close()
    with urllib.request.urlopen(f"{hub.url}/hub/api", timeout=10) as answer:
        assert answer.status == 200


def test_the_formgrader_runs_as_the_grading_account(hub):
    """The Formgrader service (which renders submissions) is not root: a script that
    ever ran in an instructor's browser would get the grading account, no more."""
    service = f"jupyterhub.singleuser --port={hub.port + 3}"
    found = subprocess.run(["pgrep", "-f", service], capture_output=True, text=True).stdout.split()
    assert found, "no Formgrader process"
    owners = {pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name for pid in found}
    assert owners == {hub.prefix + "grader"}, f"the Formgrader runs as {owners}"
    for private in ("submitted", "autograded", "feedback", "grading", "solutions"):
        listed = as_account(hub.prefix + "alice", "ls", str(hub.course / private))
        assert listed.returncode != 0, f"alice lists {private}/"


def running_server(api: HubAPI, name: str) -> str:
    """Start the student's server (if it is not running) and return a token of theirs."""
    if not api.call("GET", f"/hub/api/users/{name}")["servers"].get("", {}).get("ready"):
        api.call("POST", f"/hub/api/users/{name}/server", {})
    began = time.monotonic()
    while not api.call("GET", f"/hub/api/users/{name}")["servers"].get("", {}).get("ready"):
        assert time.monotonic() - began < 180, f"{name}'s server is not ready"
        time.sleep(0.5)
    return api.call("POST", f"/hub/api/users/{name}/tokens", {"expires_in": 600})["token"]


XSS = "window.__pwned = (window.__pwned || 0) + 1"


def test_a_script_in_a_submission_does_not_run_in_the_formgrader(hub, browser):
    """bob submits a notebook whose written answer holds ``<img onerror=...>`` and
    whose code displays the same as HTML; prof collects, autogrades and opens bob's
    submission in the Formgrader: the page shows bob's answer, carries its
    Content-Security-Policy, and runs none of bob's script."""
    url = hub.url
    api = HubAPI(url, admin_token(browser, url))
    token = running_server(api, "bob")
    path = f"/user/bob/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
    notebook = nbformat.from_dict(api.call("GET", path, token=token)["content"])
    notebook.cells.append(
        nbformat.v4.new_markdown_cell(f"bobs-marker-text <img src=x onerror='{XSS}'>")
    )
    shown = (
        f"from IPython.display import HTML, display\ndisplay(HTML(\"<img src=x onerror='{XSS}'>\"))"
    )
    notebook.cells.append(nbformat.v4.new_code_cell(shown))
    api.call("PUT", path, {"type": "notebook", "content": notebook}, token)
    body = {"course_id": "autodiff", "assignment_id": ASSIGNMENT}
    submitted = api.call("POST", "/user/bob/assignments/submit", body, token)
    assert submitted.get("success"), submitted

    prof = open_formgrader(browser, url)
    prof.locator("tr", has_text=ASSIGNMENT).locator("td.collect a").click()
    formgrader_result(prof)
    prof.goto(f"{url}/services/formgrader/formgrader")
    prof.locator("tr", has_text=ASSIGNMENT).wait_for(timeout=60_000)
    autograde_each(prof, ASSIGNMENT, ["bob"], Timer())
    prof.goto(f"{url}/services/formgrader/formgrader/manage_students/bob/{ASSIGNMENT}")
    link = prof.locator("a[href*='/submissions/']").first
    link.wait_for(timeout=60_000)
    refused: list[str] = []
    prof.on("console", lambda m: refused.append(m.text))
    prof.goto(link.evaluate("a => a.href"))
    prof.get_by_text("bobs-marker-text").first.wait_for(timeout=60_000)
    prof.wait_for_timeout(1000)  # an image that fails to load fires onerror meanwhile
    shot(prof, "xss-formgrader-submission")
    assert prof.evaluate("window.__pwned || 0") == 0, "bob's script ran in prof's browser"
    assert prof.locator('meta[http-equiv="Content-Security-Policy"]').count() == 1
    assert prof.evaluate("typeof toggle_name") == "function", "the page's own script did not run"
    prof.context.close()


def run_in_kernel(connection: Path, code: str) -> str:
    """Run ``code`` in a student's kernel (as root, through its connection file) and
    return what it printed."""
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(connection))
    client.load_connection_file()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        printed: list[str] = []

        def keep(message):
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])
            elif message["msg_type"] == "error":
                printed.append("\n".join(message["content"]["traceback"]))

        client.execute_interactive(code, timeout=60, output_hook=keep)
        return "".join(printed)
    finally:
        client.stop_channels()


def listening_ports_of(uid: int) -> list[str]:
    """TCP ports in LISTEN state (0A) that belong to ``uid`` (/proc/net/tcp*)."""
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[7]) == uid:
                ports.append(fields[1])
    return ports


def test_a_students_kernels_tmp_and_processes_are_her_own(hub, browser):
    """carol's kernel listens on no TCP port (Unix sockets in her private runtime
    folder, which bob cannot open); her /dev/shm and /tmp are her server's own and
    small; her /proc shows only her processes; and when her server stops, a process
    she detached with setsid and nohup stops with it."""
    api = HubAPI(hub.url, admin_token(browser, hub.url))
    token = running_server(api, "carol")
    kernel = api.call("POST", "/user/carol/api/kernels", {"name": "python3"}, token)
    account = pwd.getpwnam(hub.prefix + "carol")
    server = subprocess.run(
        ["pgrep", "-u", account.pw_name, "-f", "jupyterhub-singleuser"],
        capture_output=True, text=True,
    ).stdout.split()[0]  # fmt: skip
    inside = Path(f"/proc/{server}/root")  # carol's server's view of the files, as root
    connection = inside / "tmp/jupyter-runtime" / f"kernel-{kernel['id']}.json"
    info = json.loads(connection.read_text())
    assert info["transport"] == "ipc", f"the kernel listens on {info['transport']}"
    ports = listening_ports_of(account.pw_uid)
    assert len(ports) <= 1, f"carol's processes listen on TCP {ports} (her server's own only)"
    shell = f"{info['ip']}-{info['shell_port']}"
    python = str(hub.course / "hub/venv/bin/python")
    for path in (shell, f"{inside}{shell}"):  # as the machine has it, and through /proc
        reach = f"import socket; socket.socket(socket.AF_UNIX).connect({path!r})"
        knocked = as_account(hub.prefix + "bob", python, "-c", reach)
        assert knocked.returncode != 0, f"bob connected to carol's kernel at {path}"
    info["ip"] = f"{inside}{info['ip']}"
    connection = Path(tempfile.mkdtemp()) / "carol-kernel.json"
    connection.write_text(json.dumps(info))
    printed = run_in_kernel(
        connection,
        "import os, subprocess\n"
        "open('/dev/shm/carols-probe', 'w').write('x')\n"
        "open('/tmp/carols-probe', 'w').write('x')\n"
        "shm = os.statvfs('/dev/shm'); print('shm', shm.f_blocks * shm.f_frsize)\n"
        "mine = os.getuid()\n"
        "others = [p for p in os.listdir('/proc') if p.isdigit()"
        " and os.stat(f'/proc/{p}').st_uid != mine]\n"
        "print('others', len(others))\n"
        "subprocess.Popen(['setsid', 'nohup', 'sleep', '600'], start_new_session=True)\n",
    )
    assert not Path("/dev/shm/carols-probe").exists(), "carol's /dev/shm is the machine's"
    assert not Path("/tmp/carols-probe").exists(), "carol's /tmp is the machine's"
    values = dict(line.split() for line in printed.splitlines() if line[:3] in ("shm", "oth"))
    assert int(values["shm"]) <= 64 * 2**20, printed
    assert values["others"] == "0", f"carol sees others' processes: {printed}"
    detached = subprocess.run(["pgrep", "-u", account.pw_name, "sleep"], capture_output=True)
    assert detached.returncode == 0, "the detached sleep did not start"
    api.call("DELETE", "/hub/api/users/carol/server")
    no_process_left(account.pw_name, 60)


def no_process_left(account: str, seconds: float) -> None:
    """Wait until no process of ``account`` runs (zombies, ended but not yet reaped by
    their parent, do not count); fail with those left after ``seconds``."""
    deadline = time.monotonic() + seconds
    alive = ["pgrep", "-u", account, "--runstates", "D,R,S,T"]
    while subprocess.run(alive, capture_output=True).returncode == 0:
        left = subprocess.run(["ps", "-u", account, "-o", "pid,stat,args"], capture_output=True)
        assert time.monotonic() < deadline, f"left running: {left.stdout.decode()}"
        time.sleep(0.5)


def test_the_terminal_has_the_classs_environment_on_path(hub, browser):
    """In a JupyterLab terminal of alice's, ``nbgrader`` (and the kit's Python) are the
    class's environment's, as in her notebooks: the terminal does not start a login
    shell, whose profile would put the machine's PATH back."""
    import websocket

    api = HubAPI(hub.url, admin_token(browser, hub.url))
    token = running_server(api, "alice")
    terminal = api.call("POST", "/user/alice/api/terminals", {}, token)
    address = f"ws://127.0.0.1:{hub.port}/user/alice/terminals/websocket/{terminal['name']}"
    connection = websocket.create_connection(
        address, header=[f"Authorization: token {token}"], timeout=60
    )
    try:
        connection.send(json.dumps(["stdin", "echo found=$(command -v nbgrader)=\r"]))
        shown, deadline = "", time.monotonic() + 60
        while "found=/" not in shown and "found==" not in shown:
            assert time.monotonic() < deadline, f"the terminal showed: {shown[-2000:]}"
            kind, *content = json.loads(connection.recv())
            if kind == "stdout":
                shown += content[0]
    finally:
        connection.close()
    expected = f"found={hub.course / 'hub' / 'venv' / 'bin' / 'nbgrader'}="
    assert expected in shown, f"the terminal's nbgrader: {shown[-500:]}"


def test_a_student_past_the_disk_limit_is_stopped_and_told_why(hub, browser):
    """load03 fills her home past the hub's 64 MB (HUB_DISK_MB): her server is stopped
    at the next poll, and starting it again says why instead of filling the disk the
    gradebook shares."""
    api = HubAPI(hub.url, admin_token(browser, hub.url))
    running_server(api, "load03")
    account = hub.prefix + "load03"
    home = Path(pwd.getpwnam(account).pw_dir)
    filled = as_account(account, "sh", "-c", f"head -c 80000000 /dev/zero > {home}/big.bin")
    assert filled.returncode == 0, filled.stderr
    deadline = time.monotonic() + 90
    while api.call("GET", "/hub/api/users/load03")["servers"]:
        assert time.monotonic() < deadline, "load03's server still runs past the limit"
        time.sleep(1)
    no_process_left(account, 60)
    page = log_in(browser, hub.url, "load03", password("load03"))
    page.get_by_text("take more than 64 MB").first.wait_for(timeout=60_000)
    shot(page, "load03-over-disk-limit")
    page.context.close()
    (home / "big.bin").unlink()  # the course team makes room: she starts again
    running_server(api, "load03")


# --- one web origin, or one per server (SUBDOMAIN_HOST) -------------------------------

# What a student's page does with each target: opens it in a window of its own (with
# the staff member's cookies, as a link would; hub pages refuse to be framed) and, once
# its scripts have run, reads it. A page of another origin throws: nothing is read.
_READ_EACH = """async (targets) => {
    const pause = (ms) => new Promise((done) => setTimeout(done, ms));
    const read = {};
    for (const [name, url] of Object.entries(targets)) {
        const opened = window.open(url, name);
        read[name] = "";
        for (let waited = 0; waited < 30000; waited += 250) {
            await pause(250);
            try {
                const loaded = opened.location.href !== "about:blank";
                if (loaded && opened.document.readyState === "complete") {
                    await pause(4000);  // its own scripts fill it
                    read[name] = opened.document.documentElement.outerHTML;
                    break;
                }
            } catch (error) {
                break;  // another origin's page: the browser keeps it from this one
            }
        }
        opened.close();
    }
    return read;
}"""


def what_a_students_page_reads(staff, page_url: str, targets: dict[str, str]) -> dict:
    """In a staff member's browser, a page answered at ``page_url`` (what a student's
    own program answers at her server's address: here the browser is told to) opens
    ``targets`` with the staff member's cookies; returns what it could read of each."""
    page = staff.context.new_page()
    body = "<!doctype html><title>alice's page</title><p>Look at my plot!</p>"
    page.route(
        page_url, lambda route: route.fulfill(status=200, content_type="text/html", body=body)
    )
    page.goto(page_url)
    read = page.evaluate(_READ_EACH, targets)
    page.close()
    return read


def test_a_students_page_reads_staff_pages_on_one_origin_and_not_on_her_own(hub, browser):
    """A student's server runs her programs, so at her address it can answer with a
    page of hers. On the hub's one origin (the default), that page reads prof's hub
    pages and the Formgrader in prof's browser: the hole docs/instructors/hub-security.md names.
    With ``SUBDOMAIN_HOST`` each server has a host of its own: the same page reads
    nothing of prof's, while alice's JupyterLab and prof's Formgrader work."""
    api = HubAPI(hub.url, admin_token(browser, hub.url))
    prof = open_formgrader(browser, hub.url)  # his Formgrader login, in his browser
    targets = {
        "hub": f"{hub.url}/hub/home",
        "formgrader": f"{hub.url}/services/formgrader/formgrader",
    }
    read = what_a_students_page_reads(prof, f"{hub.url}/user/alice/plot.html", targets)
    prof.context.close()
    assert "prof" in read["hub"] and ASSIGNMENT in read["formgrader"], (
        "on one origin the page should read prof's pages (else this test proves nothing "
        f"below): {read}"
    )
    origin = f"http://hub.localhost:{hub.port}"  # Chromium: *.localhost is this machine
    own = f"http://alice.hub.localhost:{hub.port}"
    formgrader = f"http://formgrader--service.hub.localhost:{hub.port}/services/formgrader"
    with contextlib.suppress(urllib.error.HTTPError):  # her server starts on her host
        api.call("DELETE", "/hub/api/users/alice/server")
    hub.stop()
    hub.start(f"SUBDOMAIN_HOST={origin}")  # this module's last test: the hub stays so
    try:
        alice = log_in(browser, origin, "alice", password("alice"))
        alice.wait_for_url(f"{own}/user/alice/lab**", timeout=180_000)
        alice.wait_for_selector("#jp-main-dock-panel", timeout=120_000)
        alice.context.close()
        prof = log_in(browser, origin, "prof", password("prof"))
        prof.goto(f"{formgrader}/formgrader")
        prof.locator("tr", has_text=ASSIGNMENT).wait_for(timeout=60_000)
        # Logins are cookies of one host each; a cookie for every host below the hub's
        # only names the browser's session (for logging out everywhere), never a login.
        cookies = [(cookie["name"], cookie["domain"]) for cookie in prof.context.cookies()]
        shared = {name for name, domain in cookies if domain.startswith(".")}
        assert shared <= {"jupyterhub-session-id"}, f"cookies for every host: {cookies}"
        targets = {"hub": f"{origin}/hub/home", "formgrader": f"{formgrader}/formgrader"}
        read = what_a_students_page_reads(prof, f"{own}/user/alice/plot.html", targets)
        shot(prof, "prof-formgrader-on-its-own-host")
        prof.context.close()
        assert read == {"hub": "", "formgrader": ""}, f"alice's page read prof's pages: {read}"
    finally:
        with contextlib.suppress(urllib.error.HTTPError):
            api.call("DELETE", "/hub/api/users/alice/server")
