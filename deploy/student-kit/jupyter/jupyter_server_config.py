# Read by JupyterLab when `make lab` starts it (the Makefile puts this folder on
# JUPYTER_CONFIG_PATH). Students do not grade: the formgrader, nbgrader's instructor
# page, is not served. The Assignment List, Validate and the course list stay on.
c = get_config()  # noqa: F821  (Jupyter provides get_config)

c.ServerApp.jpserver_extensions = {"nbgrader.server_extensions.formgrader": False}
