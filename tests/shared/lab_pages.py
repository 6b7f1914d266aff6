"""What students and instructors do in the browser, shared by the browser tests
(``end_to_end/test_lab_in_browser.py``: JupyterLab on its own; ``end_to_end/test_hub.py``:
through JupyterHub).

Each helper is one step as a person takes it: the Nbgrader menu's Assignment List
(fetch, submit, fetch feedback) and the Formgrader's buttons, with Playwright's
sync API on a page that shows JupyterLab or the Formgrader.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


class Timer:
    """Seconds per step, kept for the issue note (tests assert no time)."""

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

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.steps, indent=2))


def answers_for(
    notebook: nbformat.NotebookNode, assignment: str, only: set[str] | None = None
) -> nbformat.NotebookNode:
    """``notebook`` with its answer cells (or those whose grade id is in ``only``)
    filled in from the instructor's solution."""
    source = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", 4)
    solutions = {
        cell.metadata.nbgrader["grade_id"]: cell.source
        for cell in source.cells
        if cell.metadata.get("nbgrader", {}).get("solution")
    }
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in solutions and (only is None or grade_id in only):
            lines = solutions[grade_id].splitlines()
            cell.source = "\n".join(line for line in lines if "SOLUTION" not in line)
    return notebook


def assignment_list(page) -> None:
    """Open Nbgrader > Assignment List."""
    page.get_by_role("menuitem", name="Nbgrader").click()
    page.get_by_role("menuitem", name="Assignment List").click()
    page.wait_for_selector("#released_assignments_list", timeout=30_000)


def fetch(page, assignment: str) -> str:
    """Fetch ``assignment`` from the Assignment List; returns the list's text."""
    released = page.locator("#released_assignments_list")
    button = released.locator(".list_item", has_text=assignment).get_by_role("button", name="Fetch")
    button.wait_for(timeout=60_000)
    listed = released.inner_text()
    button.click()
    downloaded = page.locator("#fetched_assignments_list .assignment-notebooks-link")
    downloaded.filter(has_text=assignment).wait_for(timeout=60_000)
    return listed


def submit(page, assignment: str) -> None:
    page.get_by_role("tab", name="Assignments").click()
    fetched = page.locator("#fetched_assignments_list")
    fetched.locator(".list_item", has_text=assignment).get_by_role("button", name="Submit").click()
    submitted = page.locator("#submitted_assignments_list .list_item")
    submitted.filter(has_text=assignment).first.wait_for(timeout=60_000)


def read_feedback(page) -> str:
    """Fetch Feedback, open the page it brings, and return what it shows."""
    page.get_by_role("tab", name="Assignments").click()
    submitted = page.locator("#submitted_assignments_list")
    submitted.get_by_role("button", name="Fetch Feedback").click()
    submitted.get_by_text("view feedback").wait_for(timeout=60_000)
    submitted.get_by_text("view feedback").click()  # the file browser goes there
    page.locator(".jp-DirListing-item", has_text=".html").dblclick()
    shown = page.frame_locator(".jp-HTMLViewer iframe").locator("body")
    shown.get_by_text("Score:").first.wait_for(timeout=30_000)
    return shown.inner_text()


def score(text: str) -> tuple[str, str]:
    """``(points, out of)`` from a feedback page's ``(Score: 20.0 / 25.0)``."""
    found = re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", text)
    assert found, f"no score in the feedback: {text[:500]}"
    return found[1], found[2]


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


def autograde_each(formgrader, assignment: str, students, timer: Timer):
    """From Manage Assignments: open the assignment's submissions and press each
    student's autograde button; returns the submissions' table."""
    row = formgrader.locator("tr", has_text=assignment)
    row.locator("td.num-submissions a").click()
    table = formgrader.locator("#main-table")
    for student in students:
        table.locator("tr", has_text=student).wait_for(timeout=30_000)
    for student in students:
        with timer(f"instructor: autograde {student} (Formgrader, sandboxed)"):
            table.locator("tr", has_text=student).locator("td.autograde a").click()
            formgrader_result(formgrader)
    return table


def return_feedback(formgrader, assignment: str) -> None:
    """Manage Assignments: generate the feedback, then release it to the exchange."""
    formgrader.locator("a", has_text="Manage Assignments").click()
    row = formgrader.locator("tr", has_text=assignment)
    row.locator("td.generate-feedback a").click()
    formgrader_result(formgrader)
    row.locator("td.release-feedback a").click()
    formgrader_result(formgrader)
