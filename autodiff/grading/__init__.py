"""Instructor tooling: grading the course's assignments with nbgrader.

Students never need to read this package. What hidden tests import from it is
``forbid_calls`` (``from autodiff.grading import forbid_calls``), and what visible
tests use to say what went wrong (``checks``: ``expect``, ``calling``, ...); everything else
runs on the instructor's side (``python -m autodiff.grading``, behind the Makefile):

* ``collect``: LMS downloads into ``submitted/``, every entry accounted for;
  ``collect_exchange``: the same from the nbgrader exchange, where ``exchange``
  publishes assignments and returns feedback (JupyterLab's Assignment List), and
  ``safe_copy`` reads each submission without following a student's links or swaps;
* ``autograde``: stage, run and record a class; ``normalize`` rebuilds a
  submission on the released cells; ``execute`` runs one notebook with its kernel in
  the ``sandbox`` (bubblewrap, limits) and ``monitor`` watching the kernel;
* ``gradebook`` and ``folders``: checked copies, the run lock, ``make restore``;
* ``pipeline``: release, feedback, grades; ``plugins``: what nbgrader runs
  (named in ``nbgrader_config.py``); ``course``: the course's folders and nbgrader;
* ``kit``: the student kit (``make student-kit``), which ships this file and
  ``helpers`` and ``checks`` only.
"""

from .checks import calling, expect, expect_error, expect_true
from .helpers import forbid_calls

__all__ = ["calling", "expect", "expect_error", "expect_true", "forbid_calls"]
