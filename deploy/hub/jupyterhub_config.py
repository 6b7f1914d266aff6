"""JupyterHub for the course on one machine: ``make hub`` (README, "Running a course").

Every setting of the hub is in this file. What differs from class to class comes from
the environment, which the Makefile passes on:

    HUB_ROSTER       the student ids, one a line (default <state>/roster.txt)
    HUB_INSTRUCTORS  hub names of the instructors, comma-separated (admins, Formgrader)
    HUB_TAS          hub names of the teaching assistants (Formgrader, not admins)
    HUB_IP, HUB_PORT where the hub listens (default 127.0.0.1:8000; 0.0.0.0 behind TLS);
                     the three ports after HUB_PORT are used on 127.0.0.1 too
    HUB_STATE        the hub's own folder (default hub/ in the course, git-ignored)
    HUB_MEM_LIMIT    memory of each student's server (default 2G)
    HUB_CPU_LIMIT    CPU cores of each student's server (default 1; 0.5 is half a core)
    HUB_ACCOUNT_PREFIX  system accounts are this + the hub name (default jupyter-)

Secrets (the cookie secret, the proxy's token) are made at the first start in the state
folder's private/ (0700, root's), with the database and the passwords, never committed. Run it as root: each student's
server runs as a system account of its own (autodiff/grading/hub.py).
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (JupyterHub provides get_config)

COURSE = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("HUB_STATE", COURSE / "hub"))
STATE.mkdir(parents=True, exist_ok=True)
STATE.chmod(0o711)  # students reach their home and the exchange by name, list nothing
# What the hub keeps (its database, the passwords, the secrets) is for root alone.
PRIVATE = STATE / "private"
PRIVATE.mkdir(mode=0o700, exist_ok=True)
PRIVATE.chmod(0o700)
# The course's exchange (nbgrader_config.py uses hub/exchange once it exists).
EXCHANGE = Path(os.environ.get("NBGRADER_EXCHANGE", STATE / "exchange"))
EXCHANGE.mkdir(exist_ok=True)
EXCHANGE.chmod(0o1777)
sys.path.insert(0, str(COURSE))  # autodiff.grading, for the spawner and the roster

# Students' servers run as other accounts on this machine: they must reach their home,
# the exchange and their environment, and nothing else of the course (solutions/, the
# gradebook, submissions). So every entry of the course folder but the hub's own is
# closed to others, and the course folder can be passed through only when it holds them.
COURSE.chmod(0o711 if STATE.parent == COURSE else 0o700)
for entry in COURSE.iterdir():
    if entry != STATE and not entry.is_symlink():
        entry.chmod(entry.stat().st_mode & ~0o007)

from autodiff.grading.hub import roster, write_accounts  # noqa: E402

# --- where it listens, what it keeps --------------------------------------------------
c.JupyterHub.ip = os.environ.get("HUB_IP", "127.0.0.1")
c.JupyterHub.port = int(os.environ.get("HUB_PORT", "8000"))
# The ports after it, on 127.0.0.1 only: the proxy's API, the hub itself, the Formgrader.
PROXY_API_PORT, HUB_PORT, FORMGRADER_PORT = (c.JupyterHub.port + n for n in (1, 2, 3))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PROXY_API_PORT}"
c.JupyterHub.hub_port = HUB_PORT
c.JupyterHub.db_url = f"sqlite:///{PRIVATE / 'jupyterhub.sqlite'}"  # users, servers, tokens
c.JupyterHub.cookie_secret_file = str(PRIVATE / "jupyterhub_cookie_secret")  # made once
c.JupyterHub.pid_file = str(PRIVATE / "jupyterhub.pid")
# configurable-http-proxy from npm, installed by make hub; the hub makes its token.
c.ConfigurableHTTPProxy.command = [str(STATE / "proxy/node_modules/.bin/configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(PRIVATE / "proxy.pid")
# Students' servers keep running across a restart of the hub.
c.JupyterHub.cleanup_servers = False

# --- who may log in -------------------------------------------------------------------
# A roster of student ids; each sets a password the first time they log in (the
# password is kept hashed in <state>/private/passwords.dbm). Instructors and TAs log in the same way.
instructors = {n for n in os.environ.get("HUB_INSTRUCTORS", "").split(",") if n}
tas = {n for n in os.environ.get("HUB_TAS", "").split(",") if n}
ROSTER = Path(os.environ.get("HUB_ROSTER", STATE / "roster.txt"))
students = roster(ROSTER)
ROSTER.chmod(ROSTER.stat().st_mode & ~0o077)  # the class list is the instructor's
c.JupyterHub.authenticator_class = "firstuseauthenticator.FirstUseAuthenticator"
c.FirstUseAuthenticator.create_users = False  # only the roster, instructors and TAs
c.FirstUseAuthenticator.dbm_path = str(PRIVATE / "passwords.dbm")
c.FirstUseAuthenticator.min_password_length = 8
c.Authenticator.allowed_users = students | instructors | tas
c.Authenticator.admin_users = instructors

# --- each student's server ------------------------------------------------------------
c.JupyterHub.spawner_class = "autodiff.grading.hub.CourseSpawner"
c.CourseSpawner.homes = str(STATE / "home")
c.CourseSpawner.account_prefix = os.environ.get("HUB_ACCOUNT_PREFIX", "jupyter-")
# Collecting checks that alice's submission was made by alice's account (a student can
# tell nbgrader another id, not another account): the exchange says how they are named.
write_accounts(EXCHANGE, c.CourseSpawner.account_prefix)
c.CourseSpawner.kit = str(COURSE / "dist" / "autodiff-student-kit")  # make student-kit
c.Spawner.cmd = [str(STATE / "venv/bin/jupyterhub-singleuser")]  # the students' venv
c.Spawner.default_url = "/lab"
c.Spawner.mem_limit = os.environ.get("HUB_MEM_LIMIT", "2G")  # its kernels stopped past it
c.Spawner.cpu_limit = float(os.environ.get("HUB_CPU_LIMIT", "1"))  # cores, shared by its kernels
c.Spawner.environment = {
    "NBGRADER_EXCHANGE": str(EXCHANGE),
    "PATH": f"{STATE / 'venv/bin'}:/usr/local/bin:/usr/bin:/bin",
}
c.Spawner.http_timeout = 120  # a first start on a busy machine
c.Spawner.start_timeout = 120

# --- the instructors' Formgrader ------------------------------------------------------
# The course folder is served to the "course-team" group by a server of its own (a hub
# service, as nbgrader's JupyterHub docs set it up), started in the course root with
# the instructor's environment; students' servers have no Formgrader at all.
c.JupyterHub.services = [
    {
        "name": "formgrader",
        "url": f"http://127.0.0.1:{FORMGRADER_PORT}",
        "command": [
            sys.executable, "-m", "jupyterhub.singleuser", "--allow-root",
            f"--port={FORMGRADER_PORT}", "--ServerApp.ip=127.0.0.1",
        ],
        "cwd": str(COURSE),
        "environment": {
            "NBGRADER_EXCHANGE": str(EXCHANGE),
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(PRIVATE / "formgrader-home"),
        },
        "oauth_no_confirm": True,
    }
]
c.JupyterHub.load_groups = {"course-team": {"users": sorted(instructors | tas)}}
c.JupyterHub.load_roles = [
    {
        "name": "course-team",
        "groups": ["course-team"],
        "scopes": ["self", "access:services!service=formgrader", "read:services"],
    }
]
