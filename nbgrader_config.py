"""nbgrader configuration: the repository root is the course directory.

Instructor notebooks live in solutions/<assignment>/, `make release` writes the
student versions to assignments/, and the Makefile drives the rest
(docs/instructors/grading.md).
"""

import os

c = get_config()  # noqa: F821  (nbgrader provides get_config)

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "autodiff"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "assignments"
# The embedded SQLite gradebook; any SQLAlchemy URL works for a department database.
c.CourseDirectory.db_url = os.environ.get(
    "NBGRADER_DB_URL", "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db")
)
c.CourseDirectory.assignment_id = ""

# Every notebook runs on the kernel named python3: the kit's own environment.
c.Execute.kernel_name = "python3"
# A cell gets this many seconds (a student's infinite loop earns nothing for that cell).
c.Execute.timeout = int(os.environ.get("GRADING_CELL_TIMEOUT", "60"))
c.Execute.interrupt_on_timeout = True

# `make autograde` runs every notebook in the grading sandbox first (its kernel can
# reach neither this folder nor the gradebook); nbgrader then takes the outputs and
# verdicts of that run instead of starting a kernel of its own (classroom/).
c.Autograde.autograde_preprocessors = [
    "classroom.plugins.ReplayExecuted",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# The grader's verdicts and notes travel in the "autodiff" metadata to the feedback.
c.ClearMetadataPreprocessor.preserve_cell_metadata_mask = {"nbgrader", "autodiff"}
c.ClearMetadataPreprocessor.preserve_nb_metadata_mask = {("language_info", "name"), "autodiff"}
# Test cells a student emptied, edited or deleted come back from the source, also
# when nbgrader itself would crash on what the student did (duplicated cells).
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "classroom.plugins.RestoreCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.OverwriteCells.add_missing_cells = True

# Feedback without hidden tests, and without anything a kernel printed: each test
# shows the grader's verdict.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "classroom.plugins.GraderFeedback",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# The lab's assignment list reads an exchange folder; nbgrader's default
# (/srv/nbgrader/exchange) needs root, so the course keeps its own (git-ignored):
# the hub's (hub/exchange) once `make hub` has made one, else .exchange. Elsewhere
# (a shared server, another hub): NBGRADER_EXCHANGE=/srv/...
_hub_exchange = os.path.join(c.CourseDirectory.root, "hub", "exchange")
c.Exchange.root = os.environ.get(
    "NBGRADER_EXCHANGE",
    _hub_exchange
    if os.path.isdir(_hub_exchange)
    else os.path.join(c.CourseDirectory.root, ".exchange"),
)
os.makedirs(c.Exchange.root, exist_ok=True)
# nbgrader collect and the formgrader's Collect button collect as `make collect` does.
c.ExchangeFactory.collect = "classroom.plugins.KitCollect"

# Whatever a student wrote is shown to the course team as text and pictures, never run:
# the Formgrader's pages and feedback clean outputs, raw cells and rendered Markdown
# (classroom/sanitize.py).
c.HTMLExporter.preprocessors = ["classroom.sanitize.SanitizeNotebook"]
c.HTMLExporter.filters = {"markdown2html": "classroom.sanitize.safe_markdown"}
