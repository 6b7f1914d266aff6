"""nbgrader's settings for students: which course this is, where its exchange is, and
how a submission is left there.

On the course's JupyterHub, the Assignment List fetches and submits through the
exchange, a folder the whole class shares: nbgrader's default place for it is
/srv/nbgrader/exchange, and the course team can name another with NBGRADER_EXCHANGE.
On your own computer there is no exchange; hand in your notebook file as README.md says.
"""

import os
import stat

from nbgrader.exchange.default.submit import ExchangeSubmit

c = get_config()  # noqa: F821  (nbgrader provides get_config)

c.CourseDirectory.course_id = "autodiff"
c.Exchange.root = os.environ.get("NBGRADER_EXCHANGE", "/srv/nbgrader/exchange")
# On a JupyterHub your server runs as a system account (jupyter-<you>, or jovyan in a
# container); your id in the course is your hub name.
if "JUPYTERHUB_USER" in os.environ:
    c.CourseDirectory.student_id = os.environ["JUPYTERHUB_USER"]


class OwnSubmit(ExchangeSubmit):
    """nbgrader's submit, but your submission's folder stays yours: nbgrader leaves it
    writable by every account (0777, so that the course team may delete it), where a
    classmate could add or replace files. Here it is 0755: the course team reads it, and
    only you can change it. (For the moment it is 0777, no one else can find it: its
    name ends in a random part, in a folder no student can list.)"""

    def copy_files(self):
        super().copy_files()
        folder = os.path.join(self.inbound_path, self.assignment_filename)
        setgid = os.stat(folder).st_mode & stat.S_ISGID  # as inbound (2733) gives it
        os.chmod(folder, 0o755 | setgid)


c.ExchangeFactory.submit = OwnSubmit
