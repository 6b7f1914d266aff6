"""A week of the course in a real browser: JupyterLab, nbgrader's extensions, Chromium.

Two students, alice and bob, each open their own copy of the student kit in
JupyterLab. The instructor releases with ``make release``; in the Assignment List
each student fetches the assignment, alice answers all of it and bob none, both
validate and submit. The instructor runs ``make collect``, opens the Formgrader,
sees both submissions, autogrades each (in the sandbox), generates and releases
feedback; each student fetches it and reads their own score.

Playwright drives Debian's ``chromium`` (``executable_path=``: Playwright's own
browser download is not used). Screenshots and the time of each step go to
``tests/artifacts/browser/`` (git-ignored). The servers are started as people start
them (``make lab``) on 127.0.0.1 with free ports, and stopped by their process group.
Both students are the same OS user here, so each gets a ``CourseDirectory.student_id``
from a config folder of their own, as JupyterHub's containers do with JUPYTERHUB_USER.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from servers import free_port, serving
from system_parts import require

from autodiff.grading import kit
from autodiff.grading.sandbox import bwrap_problem

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
ASSIGNMENT = "a1_numerical_symbolic"
STUDENTS = ("alice", "bob")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
# Every folder's .venv is the repository's, installed already: make must not install.
KEEP_VENV = ("-o", ".venv/.installed-course")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Lab:
    """A JupyterLab server started by ``make lab`` in ``folder`` (servers.py)."""

    def __init__(self, folder: Path, env: dict[str, str], stack: contextlib.ExitStack):
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        args = f"--no-browser --ip=127.0.0.1 --port={self.port} --ServerApp.token={self.token}"
        command = ["make", *KEEP_VENV, "lab", f"LAB_ARGS={args}"]
        log = folder.parent / f"{folder.name}-lab.log"
        stack.enter_context(serving(command, folder, env, self.port, log, seconds=180))

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read() or b"{}")

    def open(self, browser):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{self.url}/lab?token={self.token}")
        page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)
        page.on("dialog", lambda dialog: dialog.accept())  # the Formgrader's confirms
        return page


class Timer:
    """Seconds per step of the week, kept for the issue note (tests assert no time)."""

    def __init__(self):
        self.steps: dict[str, float] = {}

    def __call__(self, step: str):
        timer = self

        class _Step:
            def __enter__(self):
                self.start = time.monotonic()

            def __exit__(self, *exc):
                timer.steps[step] = round(time.monotonic() - self.start, 1)

        return _Step()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def browser():
    require(None if _chromium() else "Chromium is not installed", "apt install chromium")
    require(bwrap_problem(), "apt install bubblewrap")
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def week(tmp_path_factory, browser):
    """The course, the exchange, two students with kits: folders and environments."""
    tmp = tmp_path_factory.mktemp("week")
    base = {key: value for key, value in os.environ.items() if not key.startswith("JUPYTER")}
    course = tmp / "course"
    course.mkdir()
    for name in ("Makefile", "nbgrader_config.py", "pyproject.toml"):
        shutil.copy(ROOT / name, course / name)
    for name in ("solutions", "assignments"):
        shutil.copytree(ROOT / name, course / name)
    (course / ".venv").symlink_to(ROOT / ".venv")
    exchange = tmp / "exchange"
    base.update(NBGRADER_EXCHANGE=str(exchange), PYTHONDONTWRITEBYTECODE="1")
    homes = {"instructor": tmp / "instructor"}
    built = kit.build(ROOT, tmp / "dist")
    for student in STUDENTS:
        homes[student] = tmp / student
        shutil.copytree(built, homes[student] / built.name)
        (homes[student] / built.name / ".venv").symlink_to(ROOT / ".venv")
        config = homes[student] / ".student-id"
        config.mkdir()
        (config / "nbgrader_config.py").write_text(
            f"c = get_config()\nc.CourseDirectory.student_id = {student!r}\n"
        )
    envs = {}
    for who, home in homes.items():
        home.mkdir(exist_ok=True)
        envs[who] = dict(base, HOME=str(home))
        if who != "instructor":
            envs[who]["JUPYTER_CONFIG_PATH"] = str(home / ".student-id")
    return course, exchange, homes, envs, built.name


def student_lab(week, student: str, stack) -> Lab:
    """The student's kit opened with ``make lab``; its venv is the repository's (the
    kit's own first ``make lab`` installs one: timed in the issue note)."""
    _, _, homes, envs, kit_name = week
    return Lab(homes[student] / kit_name, envs[student], stack)


def answers_for(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``notebook`` with every answer cell filled in from the instructor's solution."""
    source = nbformat.read(ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", 4)
    solutions = {
        cell.metadata.nbgrader["grade_id"]: cell.source
        for cell in source.cells
        if cell.metadata.get("nbgrader", {}).get("solution")
    }
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in solutions:
            lines = solutions[grade_id].splitlines()
            cell.source = "\n".join(line for line in lines if "SOLUTION" not in line)
    return notebook


def formgrader_result(formgrader, seconds: float = 600) -> str:
    """Wait for the Formgrader's answer to a button (a success or an error box), close
    it, and fail with its text when it is an error."""
    box = formgrader.locator("#success-modal.in, #error-modal.in")
    box.wait_for(timeout=seconds * 1000)
    text, failed = box.inner_text(), formgrader.locator("#error-modal.in").count() > 0
    box.get_by_role("button", name="OK").click()
    formgrader.locator(".modal-backdrop").wait_for(state="detached")
    assert not failed, text
    return text


def assignment_list(page):
    page.get_by_role("menuitem", name="Nbgrader").click()
    page.get_by_role("menuitem", name="Assignment List").click()
    page.wait_for_selector("#released_assignments_list", timeout=30_000)


def test_a_week_of_the_course_in_the_browser(week, browser):
    course, exchange, homes, envs, kit_name = week
    timer = Timer()
    labs: list[Lab] = []
    with contextlib.ExitStack() as stack:
        stack.callback(_save_timings, timer)  # also when a step fails
        with timer("release (make release)"):
            run(["make", *KEEP_VENV, "release"], course, envs["instructor"])
        assert (exchange / "autodiff" / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").exists()

        pages = {}
        for student in STUDENTS:
            with timer(f"{student}: open the kit in JupyterLab"):
                lab = student_lab(week, student, stack)
                labs.append(lab)
                pages[student] = page = lab.open(browser)
            with timer(f"{student}: list and fetch"):
                assignment_list(page)
                released = page.locator("#released_assignments_list")
                fetch = released.locator(".list_item", has_text=ASSIGNMENT).get_by_role(
                    "button", name="Fetch"
                )
                fetch.wait_for(timeout=60_000)
                for name in sorted(p.name for p in (course / "solutions").iterdir() if p.is_dir()):
                    assert name in released.inner_text(), f"{name} not listed for {student}"
                fetch.click()
                downloaded = page.locator("#fetched_assignments_list .assignment-notebooks-link")
                downloaded.filter(has_text=ASSIGNMENT).wait_for(timeout=60_000)
            shot(page, f"1-{student}-fetched")
            fetched = homes[student] / kit_name / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
            assert fetched.exists(), f"{student}'s fetch wrote nothing at {fetched}"

        # alice answers everything (saved as the editor saves, through the contents API),
        # bob leaves the release as it is; both open their notebook.
        path = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        mine = labs[0].api("GET", f"/api/contents/{path}")["content"]
        filled = answers_for(nbformat.from_dict(mine))
        labs[0].api("PUT", f"/api/contents/{path}", {"type": "notebook", "content": filled})
        for student, page in pages.items():
            page.get_by_role("tab", name="Assignments").click()
            page.locator("#fetched_assignments_list a.assignment-notebooks-link").click()
            page.locator("#fetched_assignments_list .nested_list_item a").first.click()
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
            shot(page, f"2-{student}-notebook")

        expected = {"alice": "Success! Your notebook passes all the tests.", "bob": "failed"}
        for student, page in pages.items():
            page.get_by_role("tab", name="Assignments").click()
            with timer(f"{student}: validate"):
                page.get_by_role("button", name="Validate").click()
                dialog = page.locator(".jp-Dialog")
                dialog.wait_for(timeout=300_000)
            shot(page, f"3-{student}-validated")
            assert expected[student] in dialog.inner_text()
            dialog.get_by_role("button").last.click()
            with timer(f"{student}: submit"):
                page.locator("#fetched_assignments_list").get_by_role(
                    "button", name="Submit"
                ).click()
                submitted = page.locator("#submitted_assignments_list .list_item")
                submitted.filter(has_text=ASSIGNMENT).first.wait_for(timeout=60_000)
            shot(page, f"4-{student}-submitted")
        inbound = sorted(p.name.split("+")[0] for p in (exchange / "autodiff/inbound").iterdir())
        assert inbound == ["alice", "bob"]

        with timer("collect (make collect)"):
            report = run(["make", *KEEP_VENV, "collect"], course, envs["instructor"])
        for student in STUDENTS:
            assert (course / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").exists()
            assert student in report

        with timer("instructor: open JupyterLab and the Formgrader"):
            lab = Lab(course, envs["instructor"], stack)
            labs.append(lab)
            page = lab.open(browser)
            page.get_by_role("menuitem", name="Nbgrader").click()
            page.get_by_role("menuitem", name="Formgrader").click()
            formgrader = page.frame_locator("iframe").first
            row = formgrader.locator("tr", has_text=ASSIGNMENT)
            row.locator("td.num-submissions a").click()
            table = formgrader.locator("#main-table")
            for student in STUDENTS:
                table.locator("tr", has_text=student).wait_for(timeout=30_000)
        shot(page, "5-formgrader-submissions")
        for student in STUDENTS:
            with timer(f"instructor: autograde {student} (Formgrader, sandboxed)"):
                student_row = table.locator("tr", has_text=student)
                student_row.locator("td.autograde a").click()
                formgrader_result(formgrader)
        shot(page, "6-formgrader-autograded")
        for student, points in (("alice", "20"), ("bob", "0")):
            score = table.locator("tr", has_text=student).locator("td.score").inner_text()
            assert score.split() == [points, "/", "25"], f"{student}: {score}"

        with timer("instructor: generate and release feedback (Formgrader)"):
            formgrader.locator("a", has_text="Manage Assignments").click()
            row = formgrader.locator("tr", has_text=ASSIGNMENT)
            row.locator("td.generate-feedback a").click()
            formgrader_result(formgrader)
            row.locator("td.release-feedback a").click()
            formgrader_result(formgrader)
        shot(page, "7-formgrader-feedback-released")

        for student, page in pages.items():
            with timer(f"{student}: fetch feedback"):
                page.get_by_role("tab", name="Assignments").click()
                submitted = page.locator("#submitted_assignments_list")
                submitted.get_by_role("button", name="Fetch Feedback").click()
                submitted.get_by_text("view feedback").wait_for(timeout=60_000)
            submitted.get_by_text("view feedback").click()  # the file browser goes there
            page.locator(".jp-DirListing-item", has_text=".html").dblclick()
            shown = page.frame_locator(".jp-HTMLViewer iframe").locator("body")
            shown.get_by_text("Score:").first.wait_for(timeout=30_000)
            shot(page, f"8-{student}-feedback")
            points = "20.0 / 25.0" if student == "alice" else "0.0 / 25.0"
            assert f"(Score: {points})" in shown.inner_text()
            pages_of_feedback = list(
                (homes[student] / kit_name / ASSIGNMENT).glob("feedback/*/*.html")
            )
            assert len(pages_of_feedback) == 1, pages_of_feedback
            html = pages_of_feedback[0].read_text()
            score = re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", html)
            assert score, f"no score in {student}'s feedback"
            assert score.groups() == (("20.0", "25.0") if student == "alice" else ("0.0", "25.0"))
            assert "HIDDEN TESTS" not in html


def _save_timings(timer: Timer) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "timings.json").write_text(json.dumps(timer.steps, indent=2))
