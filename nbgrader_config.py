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
