"""nbgrader's settings for students: which course this is, and where its exchange is.

On the course's JupyterHub, the Assignment List fetches and submits through the
exchange, a folder the whole class shares: nbgrader's default place for it is
/srv/nbgrader/exchange, and the course team can name another with NBGRADER_EXCHANGE.
On your own computer there is no exchange; hand in your notebook file as README.md says.
"""

import os

c = get_config()  # noqa: F821  (nbgrader provides get_config)

c.CourseDirectory.course_id = "autodiff"
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE", "/srv/nbgrader/exchange")
# On a JupyterHub your server runs as a system account (jupyter-<you>, or jovyan in a
# container); your id in the course is your hub name.
if "JUPYTERHUB_USER" in os.environ:
    c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]
