"""Instructor tooling: grading the course's assignments with nbgrader.

Students never need to read this package. What hidden tests import from it is
``forbid_calls`` (``from autodiff.grading import forbid_calls``); everything else
runs on the instructor's side:

* ``course``: the course's folders and running nbgrader in them;
* ``collect``: LMS downloads into ``submitted/``;
* ``pipeline``: release, autograde, feedback, grades (the Makefile's targets,
  through ``python -m autodiff.grading``);
* ``plugins``: the preprocessors nbgrader runs (named in ``nbgrader_config.py``).
"""

from .helpers import forbid_calls

__all__ = ["forbid_calls"]
