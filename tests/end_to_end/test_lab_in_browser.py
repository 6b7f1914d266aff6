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
import secrets
import shutil
import subprocess
import urllib.request
from pathlib import Path

import nbformat
import pytest
from lab_pages import (
    CHROMIUM_FLAGS,
    Timer,
    answers_for,
    assignment_list,
    autograde_each,
    fetch,
    read_feedback,
    return_feedback,
    score,
    submit,
)
from servers import free_port, serving
from system_parts import require

from classroom import kit
from classroom.sandbox import bwrap_problem

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
ASSIGNMENT = "a1_numerical_symbolic"
STUDENTS = ("alice", "bob")
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
        self.log = folder.parent / f"{folder.name}-lab.log"
        stack.enter_context(serving(command, folder, env, self.port, self.log, seconds=180))

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


def test_a_week_of_the_course_in_the_browser(week, browser):
    course, exchange, homes, envs, kit_name = week
    timer = Timer()
    labs: list[Lab] = []
    with contextlib.ExitStack() as stack:
        stack.callback(timer.save, ARTIFACTS / "timings.json")  # also when a step fails
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
                listed = fetch(page, ASSIGNMENT)
                for name in sorted(p.name for p in (course / "solutions").iterdir() if p.is_dir()):
                    assert name in listed, f"{name} not listed for {student}"
            shot(page, f"1-{student}-fetched")
            fetched = homes[student] / kit_name / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
            assert fetched.exists(), f"{student}'s fetch wrote nothing at {fetched}"

        # alice answers everything (saved as the editor saves, through the contents API),
        # bob leaves the release as it is; both open their notebook.
        path = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        mine = labs[0].api("GET", f"/api/contents/{path}")["content"]
        filled = answers_for(nbformat.from_dict(mine), ASSIGNMENT)
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
            said = dialog.inner_text()
            lab_log = labs[list(pages).index(student)].log.read_text()[-3000:]
            assert expected[student] in said, f"{said}\n--- {student}'s lab server:\n{lab_log}"
            dialog.get_by_role("button").last.click()
            with timer(f"{student}: submit"):
                submit(page, ASSIGNMENT)
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
            formgrader.locator("tr", has_text=ASSIGNMENT).wait_for(timeout=30_000)
        table = autograde_each(formgrader, ASSIGNMENT, STUDENTS, timer)
        shot(page, "6-formgrader-autograded")
        for student, points in (("alice", "20"), ("bob", "0")):
            row = table.locator("tr", has_text=student).locator("td.score").inner_text()
            assert row.split() == [points, "/", "25"], f"{student}: {row}"

        with timer("instructor: generate and release feedback (Formgrader)"):
            return_feedback(formgrader, ASSIGNMENT)
        shot(page, "7-formgrader-feedback-released")

        for student, page in pages.items():
            with timer(f"{student}: fetch feedback"):
                shown = read_feedback(page)
            shot(page, f"8-{student}-feedback")
            points = ("20.0", "25.0") if student == "alice" else ("0.0", "25.0")
            assert score(shown) == points, f"{student} was shown {score(shown)}"
            pages_of_feedback = list(
                (homes[student] / kit_name / ASSIGNMENT).glob("feedback/*/*.html")
            )
            assert len(pages_of_feedback) == 1, pages_of_feedback
            html = pages_of_feedback[0].read_text()
            assert score(html) == points, f"{student}'s feedback file: {score(html)}"
            assert "HIDDEN TESTS" not in html
