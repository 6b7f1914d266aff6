"""The instructor's commands, behind the Makefile's grading targets.

``python -m classroom release | collect [ZIP] | autograde | feedback | grades
| restore | kit | hub-password NAME``
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .autograde import autograde, submitted_assignments
from .collect import collect
from .collect_exchange import collect_exchange
from .course import assignments
from .folders import FOLDERS, print_folder_copies, restore_folder
from .gradebook import restore
from .kit import build as build_kit
from .pipeline import feedback, grades, release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m classroom", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("release", help="write assignments/ from solutions/, publish them")
    p = commands.add_parser(
        "collect",
        help="take submissions into submitted/: from an LMS zip, or from the nbgrader exchange",
        description="collect [ASSIGNMENT]: the latest submissions in the nbgrader exchange "
        "(every released assignment, or one); collect ZIP [ASSIGNMENT]: an LMS download",
    )
    p.add_argument("zip", nargs="?", help="an LMS download (a .zip file); without it: the exchange")
    p.add_argument("assignment", nargs="?")
    p = commands.add_parser("autograde", help="grade submissions (each student apart)")
    p.add_argument("assignment", nargs="?")
    p.add_argument("--student")
    p.add_argument("--force", action="store_true", help="grade again what is graded")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per student")
    p.add_argument("--jobs", type=int, default=1, help="submissions graded at once")
    p.add_argument(
        "--sandbox", default="auto", help="bwrap (auto), or none: student code runs as you"
    )
    p.add_argument("--wait", action="store_true", help="wait for a grading run that is going")
    p = commands.add_parser("feedback", help="HTML feedback without hidden tests")
    p.add_argument("assignment", nargs="?")
    commands.add_parser("grades", help="CSV and histograms in grading/")
    p = commands.add_parser("validate", help="run a notebook in the sandbox; its test verdicts")
    p.add_argument("notebook", type=Path)
    p.add_argument("--sandbox", default="auto", help="bwrap (auto), or none")
    p = commands.add_parser("restore", help="put back a kept copy of the gradebook or a folder")
    p.add_argument("which", nargs="?", help="list | a copy's name or number | submitted ...")
    p.add_argument("assignment", nargs="?", help="for a folder: the assignment")
    p.add_argument("stamp", nargs="?", help="for a folder: which copy (default the newest)")
    p.add_argument("--wait", action="store_true", help="wait for a grading run to end")
    p = commands.add_parser("kit", help="release (not published), then the student kit in dist/")
    p.add_argument("--out", type=Path, default=Path("dist"), help="folder for the kit")
    p = commands.add_parser("hub-password", help="a new first password for one hub account")
    p.add_argument("name", help="the account: a student id, or an instructor's or TA's name")
    state = Path(os.environ.get("HUB_STATE", "hub"))  # as deploy/hub/jupyterhub_config.py
    p.add_argument("--state", type=Path, default=state, help=f"the hub's folder ({state}/)")
    args = parser.parse_args(argv)
    root = Path.cwd()
    if args.command == "validate":  # any notebook, anywhere
        return validate(args.notebook, args.sandbox)
    if args.command == "hub-password":  # the hub's folder, wherever it is
        from .hub_auth import hub_password

        password = hub_password(args.name, args.state)
        print(
            f"{args.name}'s new password: {password} (also in {args.state}/private/credentials.csv)"
        )
        return 0
    if not (root / "nbgrader_config.py").exists():
        raise SystemExit("error: run this from the course root (where nbgrader_config.py is)")
    _not_as_root_on_a_hub(root, args.command)
    if args.command == "release":
        release(root)
    elif args.command == "collect":
        _collect(root, args.zip, args.assignment)
    elif args.command == "autograde":
        names = [args.assignment] if args.assignment else submitted_assignments(root)
        for name in names:
            print(f"autograding {name}")
            autograde(
                root,
                name,
                args.student,
                args.force,
                args.timeout,
                jobs=args.jobs,
                sandbox=args.sandbox,
                wait=args.wait,
            )
    elif args.command == "feedback":
        feedback(root, args.assignment)
    elif args.command == "grades":
        grades(root)
    elif args.command == "restore":
        _restore(root, args.which, args.assignment, args.stamp, args.wait)
    elif args.command == "kit":
        release(root, publish=False)  # the kit has today's release; students see it once published
        kit = args.out / build_kit(root, root / args.out).name
        print(f"student kit: {kit}/ and {kit}.zip")
    return 0


def validate(notebook: Path, sandbox: str) -> int:
    """Run a notebook as grading would (in the sandbox, with its folder as the working
    folder) and print each test cell's verdict; exit 1 when one did not pass."""
    import tempfile

    from .execute import execute
    from .sandbox import choose

    with tempfile.TemporaryDirectory() as scratch:
        ran = execute(notebook, notebook.parent, Path(scratch) / "out.ipynb", choose(sandbox))
    failed = 0
    for cell in ran.cells:
        verdict = cell.metadata.get("autodiff")
        if verdict:
            name = cell.metadata.get("nbgrader", {}).get("grade_id", "?")
            detail = verdict.get("error") or "; ".join(verdict.get("findings", []))
            if verdict.get("stopped"):
                detail = f"this test {verdict['stopped']}"
            detail += "".join(f"; {reason}" for reason in verdict.get("because", []))
            print(f"{name:<30} {verdict['verdict']:<10} {detail}")
            failed += verdict["verdict"] != "passed"
    meta = ran.metadata.get("autodiff", {})
    for note in meta.get("cells", []):
        print(note)
    for hit in meta.get("limits_hit", []):
        print(f"limit hit: {hit}")
    return 1 if failed else 0


def _not_as_root_on_a_hub(root: Path, command: str) -> None:
    """On a course ``make hub`` serves, grading is the grading account's: as root it
    would read and copy what that account can write (a link in ``solutions/`` would
    put a file of root's into the kit) and leave files that account cannot change."""
    import os

    from .exchange import owner
    from .hub_setup import GRADEBOOK

    submitted = root / "submitted"
    if os.geteuid() != 0 or not submitted.is_dir() or submitted.lstat().st_uid == 0:
        return
    account = owner(submitted)
    raise SystemExit(
        f"error: this course is graded by the account {account} (make hub set it up): "
        f"grade from the Formgrader, or as that account with the hub's grading environment:"
        f" sudo -u {account} env PYTHONPATH=$PWD NBGRADER_DB_URL=sqlite:///$PWD/{GRADEBOOK}"
        f" hub/grading-venv/bin/python -m classroom {command} ..."
    )


def _collect(root: Path, source: str | None, assignment: str | None) -> None:
    """``collect x.zip [a]`` takes a zip; ``collect [a]``, the exchange."""
    if source is not None and (source.endswith(".zip") or Path(source).is_file()):
        collect(root, Path(source), assignment)
    elif assignment is not None or (source is not None and source not in assignments(root)):
        known = ", ".join(assignments(root))
        raise SystemExit(
            f"error: {source} is neither a zip file (ZIP=path/to/download.zip) "
            f"nor an assignment ({known})"
        )
    else:
        collect_exchange(root, source)


def _restore(
    root: Path, which: str | None, assignment: str | None, when: str | None, wait: bool
) -> None:
    if which == "list":
        restore(root, "list")
        print_folder_copies(root)
    elif which in FOLDERS or which == "submissions":
        restore_folder(root, which, assignment, when, wait)
    else:
        restore(root, which, wait)


if __name__ == "__main__":
    sys.exit(main())
