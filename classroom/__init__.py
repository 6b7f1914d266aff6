"""The class around the library: the instructor's tooling for running the course.

The instructor (and the course team: TAs, whoever runs the hub) uses this package;
students never receive it: the student kit carries ``autodiff/`` only, and a student's
server on the hub has no copy. It imports ``autodiff``; nothing in ``autodiff`` imports
it. ``python -m classroom`` (behind the Makefile's grading targets) runs its commands:

* ``collect``: LMS downloads into ``submitted/``, every entry accounted for;
  ``collect_exchange``: the same from the nbgrader exchange, where ``exchange``
  publishes assignments and returns feedback (JupyterLab's Assignment List), and
  ``safe_copy`` reads each submission without following a student's links or swaps;
* ``autograde``: stage, run and record a class; ``normalize`` rebuilds a submission on
  the released cells; ``execute`` runs one notebook with its kernel in the ``sandbox``
  (bubblewrap, limits) and ``monitor`` watching the kernel (from inside it);
* ``gradebook`` and ``folders``: checked copies, the run lock, ``make restore``;
* ``pipeline``: release, feedback, grades; ``plugins``: what nbgrader runs (named in
  ``nbgrader_config.py``); ``course``: the course's folders and nbgrader;
  ``sanitize`` and ``formgrader_guard``: the Formgrader's pages run no student's script;
* ``kit``: the student kit (``make student-kit``);
* ``hub``, ``hub_auth``, ``hub_setup``: ``make hub``'s spawner, logins and set-up.

What released notebooks and students' servers import stays in ``autodiff.grading``.
"""
