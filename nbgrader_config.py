"""nbgrader configuration: the repository root is the course directory.

Instructor notebooks live in solutions/<assignment>/, `make release` writes the
student versions to assignments/, and the Makefile drives the rest (README.md,
"Grading").
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

# Grading goes on when a student's cell kills the kernel (autodiff/grading/plugins.py).
c.Autograde.autograde_preprocessors = [
    "autodiff.grading.plugins.ResilientExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# Test cells a student emptied, edited or deleted come back from the source, also
# when nbgrader itself would crash on what the student did (duplicated cells).
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "autodiff.grading.plugins.RestoreCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.OverwriteCells.add_missing_cells = True

# Feedback without hidden tests: neither their source nor their tracebacks.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "autodiff.grading.plugins.RedactHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# LMS downloads: Canvas, Moodle, or one folder per student (make collect ZIP=...).
c.ZipCollectApp.collector_plugin = "autodiff.grading.collect.LMSCollector"

# The lab's assignment list reads an exchange folder; nbgrader's default
# (/srv/nbgrader/exchange) needs root, so the course keeps its own (git-ignored).
# On a JupyterHub, point it at a shared folder instead: NBGRADER_EXCHANGE=/srv/...
c.Exchange.root = os.environ.get(
    "NBGRADER_EXCHANGE", os.path.join(c.CourseDirectory.root, ".exchange")
)
os.makedirs(c.Exchange.root, exist_ok=True)
