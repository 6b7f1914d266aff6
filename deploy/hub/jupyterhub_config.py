"""JupyterHub for the course on one machine: ``make hub`` (docs/instructors/hub.md).

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
    HUB_GRADER       the account that grades and runs the Formgrader (autodiff-grader)
    HUB_DISK_MB      what each student's files may take, home and submissions (2048)
    HUB_STUDENTS_GROUP  the group of every student's account (autodiff-students)
    HUB_SUBDOMAIN_HOST  https://hub.example.org: each student's server (and the
                     Formgrader) on a host of its own below it, alice.hub.example.org
                     (wildcard DNS and a wildcard certificate); unset: one origin

Secrets (the cookie secret, the proxy's token) are made at the first start in the state
folder's private/ (0700, root's), with the database and the passwords, never committed.
Run it as root: each student's server runs as a system account of its own
(classroom/hub.py); the Formgrader and grading run as the grading account, and
the hub sets the course up for that at every start (classroom/hub_setup.py).
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (JupyterHub provides get_config)

os.umask(0o077)  # whatever the hub makes is private from the moment it exists
COURSE = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("HUB_STATE", COURSE / "hub"))
STATE.mkdir(mode=0o711, parents=True, exist_ok=True)
STATE.chmod(0o711)  # students reach their home and the exchange by name, list nothing
# What the hub keeps (its database, the passwords, the secrets) is for root alone.
PRIVATE = STATE / "private"
PRIVATE.mkdir(mode=0o700, exist_ok=True)
PRIVATE.chmod(0o700)
sys.path.insert(0, str(COURSE))  # classroom, for the spawner and the roster

from classroom import hub_setup  # noqa: E402
from classroom.hub import roster  # noqa: E402
from classroom.hub_auth import issue_credentials  # noqa: E402
from classroom.sandbox import Cgroup  # noqa: E402

hub_setup.check_state_folder(STATE)
# The grading account runs the Formgrader and every grading step; root runs nothing of
# the course but the hub. It holds the grading data; the code stays root's.
GRADER = hub_setup.grading_account(
    os.environ.get("HUB_GRADER", "autodiff-grader"), STATE / "grader"
)
hub_setup.hand_course_to(COURSE, STATE, GRADER)
if not Cgroup.delegate(GRADER.pw_uid, GRADER.pw_gid):  # its own, for its sandboxes
    print("note: no cgroup for the grading account here: grading caps each process (rlimits)")
# The course's exchange (nbgrader_config.py uses hub/exchange once it exists), its
# course folders made now, before any student could make them.
EXCHANGE = Path(os.environ.get("NBGRADER_EXCHANGE", STATE / "exchange"))
for line in hub_setup.make_exchange(EXCHANGE, GRADER):
    print(f"warning: {line}")
STUDENT_SETTINGS = hub_setup.write_student_settings(STATE / "student-settings")
note = hub_setup.hidepid_note()
if note:
    print(note)

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
# One web origin per server. A student's server runs whatever she starts, so it can
# answer with a page of hers; on the hub's own origin that page would script the hub
# and the Formgrader in a staff member's browser. On a host of its own, it cannot.
SUBDOMAIN_HOST = os.environ.get("HUB_SUBDOMAIN_HOST", "")
if SUBDOMAIN_HOST:
    c.JupyterHub.subdomain_host = SUBDOMAIN_HOST
    # cookies only the host that set them receives (the __Host- prefix needs https)
    c.JupyterHub.cookie_host_prefix_enabled = SUBDOMAIN_HOST.startswith("https://")
else:
    print(hub_setup.ONE_ORIGIN_NOTE)
# Students' servers keep running across a restart of the hub, and stop (with every
# process they started) when their student logs out.
c.JupyterHub.cleanup_servers = False
c.JupyterHub.shutdown_on_logout = True

# --- who may log in -------------------------------------------------------------------
# A roster of student ids. Nobody sets their own first password: the hub gives each
# name one the first time it sees it, in <state>/private/credentials.csv (root's, 0600),
# for the course team to hand out; each can change it at /hub/auth/change-password.
# Failed logins are limited per account and per address (classroom/hub_auth.py).
instructors = {n for n in os.environ.get("HUB_INSTRUCTORS", "").split(",") if n}
tas = {n for n in os.environ.get("HUB_TAS", "").split(",") if n}
ROSTER = Path(os.environ.get("HUB_ROSTER", STATE / "roster.txt"))
students = roster(ROSTER)
ROSTER.chmod(ROSTER.stat().st_mode & ~0o077)  # the class list is the instructor's
c.JupyterHub.authenticator_class = "classroom.hub_auth.CourseAuthenticator"
c.CourseAuthenticator.dbm_path = str(PRIVATE / "passwords.dbm")
c.CourseAuthenticator.min_password_length = 8
c.Authenticator.allowed_users = students | instructors | tas
issued = issue_credentials(
    students | instructors | tas, PRIVATE / "passwords.dbm", PRIVATE / "credentials.csv"
)
if issued:
    print(f"first passwords for {len(issued)} new accounts: {PRIVATE / 'credentials.csv'}")
c.Authenticator.admin_users = instructors

# --- each student's server ------------------------------------------------------------
c.JupyterHub.spawner_class = "classroom.hub.CourseSpawner"
c.CourseSpawner.homes = str(STATE / "home")
c.CourseSpawner.account_prefix = os.environ.get("HUB_ACCOUNT_PREFIX", "jupyter-")
# Collecting checks that alice's submission was made by alice's account (a student can
# tell nbgrader another id, not another account): the exchange says how they are named.
hub_setup.write_accounts(EXCHANGE, c.CourseSpawner.account_prefix)
# Each student's files (home, submissions) may take HUB_DISK_MB (0: no limit); checked
# at every poll of a running server (Spawner.poll_interval, HUB_POLL_SECONDS).
c.CourseSpawner.disk_mb = int(os.environ.get("HUB_DISK_MB", "2048"))
c.CourseSpawner.exchange = str(EXCHANGE / "autodiff")
# Students' accounts have no login shell; this group of theirs is for the machine's
# sshd (DenyGroups) and cron (docs/instructors/hub-security.md).
c.CourseSpawner.group = hub_setup.students_group(
    os.environ.get("HUB_STUDENTS_GROUP", "autodiff-students")
)
c.Spawner.poll_interval = int(os.environ.get("HUB_POLL_SECONDS", "30"))
c.CourseSpawner.settings = str(STUDENT_SETTINGS)
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
# It runs as the grading account, never root, with its umask private, no terminals,
# and the Formgrader's pages guarded (deploy/instructor: classroom/sanitize.py),
# in the grading environment make hub built (the course's autodiff and classroom first
# on the path).
GRADING_PYTHON = os.environ.get("HUB_GRADING_PYTHON", sys.executable)
c.JupyterHub.services = [
    {
        "name": "formgrader",
        "url": f"http://127.0.0.1:{FORMGRADER_PORT}",
        "user": GRADER.pw_name,
        "command": [
            "/bin/sh", "-c", 'umask 077 && exec "$0" "$@"',
            GRADING_PYTHON, "-m", "jupyterhub.singleuser",
            f"--port={FORMGRADER_PORT}", "--ServerApp.ip=127.0.0.1",
            "--ServerApp.terminals_enabled=False",
        ],
        "cwd": str(COURSE),
        "environment": {
            "NBGRADER_EXCHANGE": str(EXCHANGE),
            "NBGRADER_DB_URL": f"sqlite:///{COURSE / hub_setup.GRADEBOOK}",
            "PATH": f"{Path(GRADING_PYTHON).parent}:/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": str(COURSE),
            "HOME": GRADER.pw_dir,
            "JUPYTER_CONFIG_PATH": str(COURSE / "deploy" / "instructor"),
        },
        "oauth_no_confirm": True,
    }
]  # fmt: skip
c.JupyterHub.load_groups = {"course-team": {"users": sorted(instructors | tas)}}
c.JupyterHub.load_roles = [
    {
        "name": "course-team",
        "groups": ["course-team"],
        "scopes": ["self", "access:services!service=formgrader", "read:services"],
    }
]
