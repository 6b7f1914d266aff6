"""The class past one machine (deploy/z2jh/, docs/instructors/scaling.md): Zero to JupyterHub's Helm
values, the single-user image's Dockerfile, the exchange's volume.

Nothing here can run Kubernetes or build an image, so these checks read the files: the
values name only keys the chart has (its own schema, deploy/z2jh/values.schema.yaml), and
the image, the package set, the Jupyter settings and the exchange agree across the values,
the Dockerfile, the student kit and the tests' own environment. Each check returns what
is wrong; a test runs it on the real files, and another on a copy with a planted mistake,
which it must find.
"""

import copy
import importlib.metadata
import re
import shutil
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from jsonschema import validators
from packaging.requirements import Requirement
from traitlets.config.loader import PyFileConfigLoader

from classroom import kit as student_kit

ROOT = Path(__file__).resolve().parents[2]
Z2JH = ROOT / "deploy" / "z2jh"
EXCHANGE = "/srv/nbgrader/exchange"  # nbgrader's default place, and the student kit's
EXCHANGE_VOLUME = "nbgrader-exchange"
STAFF_OVERRIDE = "01-staff-formgrader"


def read_yaml(path: Path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def values() -> dict:
    return read_yaml(Z2JH / "values.yaml")


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (Z2JH / "Dockerfile").read_text()


@pytest.fixture(scope="module")
def manifest() -> dict[str, Path]:
    return student_kit.manifest(ROOT)


# --- reading a Dockerfile -------------------------------------------------------------


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def copies(dockerfile: str) -> list[tuple[list[str], str]]:
    """Each COPY as (sources in the build context, destination in the image)."""
    found = []
    for word, rest in instructions(dockerfile):
        if word == "COPY":
            parts = [part for part in rest.split() if not part.startswith("--")]
            found.append((parts[:-1], parts[-1]))
    return found


def env(dockerfile: str, name: str) -> str | None:
    for word, rest in instructions(dockerfile):
        if word == "ENV" and rest.startswith(f"{name}="):
            return rest.split("=", 1)[1].strip('"')
    return None


def image_files(dockerfile: str, manifest: dict[str, Path]) -> dict[str, Path]:
    """Where the image puts each file of the build context (the student kit), and which
    file of this repository that is. The context is the kit, so a file is in it only
    when the kit's manifest names it."""
    placed = {}
    for sources, destination in copies(dockerfile):
        for source in sources:
            source = source.rstrip("/")
            for name, origin in manifest.items():
                if source == ".":
                    placed[f"{destination.rstrip('/')}/{name}"] = origin
                elif name == source:  # one file: into a folder (ending in /), or as a name
                    target = (
                        destination + Path(name).name if destination.endswith("/") else destination
                    )
                    placed[target] = origin
                elif name.startswith(source + "/"):
                    placed[f"{destination.rstrip('/')}/{name[len(source) + 1 :]}"] = origin
    return placed


# --- the checks -----------------------------------------------------------------------


def schema_problems(values: dict, schema: dict) -> list[str]:
    """Keys and types the chart's schema refuses. Helm validates the chart's defaults
    merged with these values, so "required" (filled by the defaults) is not asked here."""
    lenient = validators.extend(jsonschema.Draft7Validator, {"required": lambda *args: None})
    return [
        f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
        for error in lenient(schema).iter_errors(values)
    ]


def image_name(values: dict) -> str:
    image = values["singleuser"]["image"]
    return f"{image['name']}:{image['tag']}"


def image_problems(values: dict, dockerfile: str) -> list[str]:
    """The image the values run is the one the Dockerfile says it builds, on a base
    pinned to a dated tag."""
    problems = []
    built = re.findall(r"^# image: (\S+)$", dockerfile, re.MULTILINE)
    if built != [image_name(values)]:
        problems.append(f"the Dockerfile builds {built}, values run {image_name(values)}")
    for container in values["singleuser"].get("initContainers", []):
        if container["image"] != image_name(values):
            problems.append(f"initContainer {container['name']} runs {container['image']}")
    bases = [rest for word, rest in instructions(dockerfile) if word == "FROM"]
    if not (
        len(bases) == 1
        and re.fullmatch(r"quay\.io/jupyter/minimal-notebook:\d{4}-\d\d-\d\d", bases[0])
    ):
        problems.append(
            f"base image {bases} is not quay.io/jupyter/minimal-notebook at a dated tag"
        )
    return problems


def install_problems(dockerfile: str, manifest: dict[str, Path]) -> list[str]:
    """The image installs the kit's package with the course extra, from the kit's
    pyproject.toml, which is this repository's (the one the tests install)."""
    kit = [destination for sources, destination in copies(dockerfile) if sources == ["."]]
    if len(kit) != 1:
        return [f"the kit is copied into the image {len(kit)} times, not once"]
    installs = [
        rest for word, rest in instructions(dockerfile) if word == "RUN" and "pip install" in rest
    ]
    wanted = f'"{kit[0]}[course]"'
    problems = [] if any(wanted in rest for rest in installs) else [f"no pip install {wanted}"]
    if manifest.get("pyproject.toml") != ROOT / "pyproject.toml":
        problems.append("the kit's pyproject.toml is not the repository's")
    return problems


def settings_problems(dockerfile: str, manifest: dict[str, Path]) -> list[str]:
    """JUPYTER_CONFIG_PATH in the image holds the student kit's Jupyter settings and its
    nbgrader_config.py, the files the kit's own `make lab` uses."""
    config_path = env(dockerfile, "JUPYTER_CONFIG_PATH")
    if config_path is None:
        return ["the image sets no JUPYTER_CONFIG_PATH"]
    placed = image_files(dockerfile, manifest)
    settings = ROOT / student_kit.TEMPLATES
    wanted = {
        "jupyter_server_config.py": settings / "jupyter" / "jupyter_server_config.py",
        "labconfig/page_config.json": settings / "jupyter" / "labconfig" / "page_config.json",
        "nbgrader_config.py": settings / "nbgrader_config.py",
    }
    return [
        f"{config_path}/{name} is not {source.relative_to(ROOT)}"
        for name, source in wanted.items()
        if placed.get(f"{config_path}/{name}") != source
    ]


def exchange_problems(values: dict, claim: dict) -> list[str]:
    """One exchange: the volume mounted in every user pod at NBGRADER_EXCHANGE, which is
    nbgrader's and the kit's default place; a ReadWriteMany claim; its root made 1777."""
    singleuser = values["singleuser"]
    storage = singleuser["storage"]
    problems = []
    volumes = {volume["name"]: volume for volume in storage.get("extraVolumes", [])}
    claim_name = volumes.get(EXCHANGE_VOLUME, {}).get("persistentVolumeClaim", {}).get("claimName")
    if claim_name != claim["metadata"]["name"]:
        problems.append(
            f"the exchange volume claims {claim_name!r}, the claim is {claim['metadata']['name']!r}"
        )
    if "ReadWriteMany" not in claim["spec"]["accessModes"]:
        problems.append("the exchange claim is not ReadWriteMany")
    mounts = [
        mount["mountPath"]
        for mount in storage.get("extraVolumeMounts", [])
        if mount["name"] == EXCHANGE_VOLUME
    ]
    if mounts != [EXCHANGE]:
        problems.append(f"the exchange is mounted at {mounts}, not {EXCHANGE}")
    if singleuser.get("extraEnv", {}).get("NBGRADER_EXCHANGE") != EXCHANGE:
        problems.append(f"NBGRADER_EXCHANGE is not {EXCHANGE}")
    chmod = [
        container
        for container in singleuser.get("initContainers", [])
        if f"chmod 1777 {EXCHANGE}" in " ".join(container.get("command", []))
        and {"name": EXCHANGE_VOLUME, "mountPath": EXCHANGE} in container.get("volumeMounts", [])
        and container.get("securityContext", {}).get("runAsUser") == 0
    ]
    if not chmod:
        problems.append(f"no initContainer, as root, makes {EXCHANGE} 1777")
    return problems


# client_secret, cookieSecret, password, api_token, apiToken, secretToken, CryptKeeper's keys
SECRET_KEY = re.compile(r"secret|password|passphrase|(^|_)token$|Token$|^keys$", re.IGNORECASE)


def secret_problems(values, path: str = "") -> list[str]:
    """Secrets are set at `helm upgrade` time, never in the committed values."""
    problems = []
    if isinstance(values, dict):
        for key, value in values.items():
            where = f"{path}.{key}" if path else str(key)
            if SECRET_KEY.search(str(key)) and value not in (None, ""):
                problems.append(f"{where} holds a secret")
            problems += secret_problems(value, where)
    elif isinstance(values, list):
        for index, value in enumerate(values):
            problems += secret_problems(value, f"{path}[{index}]")
    return problems


def staff_problems(values: dict, dockerfile: str) -> list[str]:
    """The staff's servers leave the student settings (no Formgrader) off the config path,
    and the staff group is one that may sign in."""
    config = values["hub"]["config"]
    override = config["KubeSpawner"]["group_overrides"][STAFF_OVERRIDE]
    student_path = env(dockerfile, "JUPYTER_CONFIG_PATH")
    staff_path = override["spawner_override"]["environment"].get("JUPYTER_CONFIG_PATH")
    problems = []
    if staff_path is None or student_path in staff_path.split(":"):
        problems.append(f"staff servers keep {student_path} on JUPYTER_CONFIG_PATH")
    allowed = set(config["GenericOAuthenticator"]["allowed_groups"])
    if not set(override["groups"]) <= allowed:
        problems.append(f"staff groups {override['groups']} may not sign in ({sorted(allowed)})")
    return problems


# --- the files as they are ------------------------------------------------------------


def test_values_fit_the_charts_schema(values):
    schema = read_yaml(Z2JH / "values.schema.yaml")
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema_problems(values, schema) == []


def test_values_run_the_image_the_dockerfile_builds(values, dockerfile):
    assert image_problems(values, dockerfile) == []


def test_image_installs_the_package_set_the_tests_install(dockerfile, manifest):
    assert install_problems(dockerfile, manifest) == []
    course = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for requirement in map(Requirement, course["course"]):
        installed = importlib.metadata.version(requirement.name)
        assert requirement.specifier.contains(installed, prereleases=True), (requirement, installed)


def test_image_holds_the_student_kits_jupyter_settings(dockerfile, manifest):
    assert settings_problems(dockerfile, manifest) == []


def test_exchange_is_one_shared_volume(values):
    claim = read_yaml(Z2JH / "exchange-pvc.yaml")
    assert exchange_problems(values, claim) == []
    kit_config = PyFileConfigLoader("nbgrader_config.py", str(ROOT / student_kit.TEMPLATES))
    with pytest.MonkeyPatch.context() as env_vars:
        env_vars.delenv("NBGRADER_EXCHANGE", raising=False)
        assert kit_config.load_config().Exchange.root == EXCHANGE


def test_values_hold_no_secret(values):
    assert secret_problems(values) == []


def test_staff_servers_leave_the_student_settings_out(values, dockerfile):
    assert staff_problems(values, dockerfile) == []


def server_config(config_path: list[Path], cwd: Path, monkeypatch):
    """What nbgrader (the Assignment List, the Formgrader) and Jupyter Server read from
    a JUPYTER_CONFIG_PATH: nbgrader's config, and which server extensions it switches off."""
    from nbgrader.apps import NbGrader

    monkeypatch.setenv("JUPYTER_CONFIG_PATH", ":".join(map(str, config_path)))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(cwd / ".jupyter"))
    monkeypatch.chdir(cwd)
    NbGrader.clear_instance()
    app = NbGrader()
    app.load_config_file()
    switched_off = {}
    for folder in config_path:
        if (folder / "jupyter_server_config.py").exists():
            loaded = PyFileConfigLoader("jupyter_server_config.py", str(folder)).load_config()
            switched_off.update(loaded.ServerApp.get("jpserver_extensions", {}))
    NbGrader.clear_instance()
    return app.config, switched_off


def test_a_students_server_as_the_image_sets_it_up(
    values, dockerfile, manifest, tmp_path, monkeypatch
):
    # The image's config folder, laid out from the Dockerfile's COPY lines and the kit.
    config_path = env(dockerfile, "JUPYTER_CONFIG_PATH")
    folder = tmp_path / "image-config"
    for target, origin in image_files(dockerfile, manifest).items():
        if target.startswith(config_path + "/"):
            (folder / target[len(config_path) + 1 :]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(origin, folder / target[len(config_path) + 1 :])
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("NBGRADER_EXCHANGE", values["singleuser"]["extraEnv"]["NBGRADER_EXCHANGE"])
    config, switched_off = server_config([folder], home, monkeypatch)
    assert config.CourseDirectory.course_id == "autodiff"
    assert config.Exchange.root == EXCHANGE
    assert switched_off == {"nbgrader.server_extensions.formgrader": False}


def test_a_staff_server_reads_the_course_config(values, tmp_path, monkeypatch):
    # The staff's clone of the course stands where the override says; this repository
    # stands in for it.
    override = values["hub"]["config"]["KubeSpawner"]["group_overrides"][STAFF_OVERRIDE]
    environment = override["spawner_override"]["environment"]
    assert environment["JUPYTER_CONFIG_PATH"] == environment["PYTHONPATH"]
    assert environment["JUPYTER_CONFIG_PATH"].startswith(
        values["singleuser"]["storage"]["homeMountPath"] + "/"
    )
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("NBGRADER_EXCHANGE", str(tmp_path / "exchange"))
    config, switched_off = server_config([ROOT], home, monkeypatch)
    assert Path(config.CourseDirectory.root) == ROOT
    assert config.CourseDirectory.course_id == "autodiff"
    assert switched_off == {}  # the Formgrader stays on


# --- each check finds a planted mistake -----------------------------------------------


def planted(values: dict, path: str, value) -> dict:
    """A copy of the values with one key set (a dotted path; [n] for a list item)."""
    changed = copy.deepcopy(values)
    *parents, last = re.findall(r"[^.\[\]]+", path)
    node = changed
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    return changed


def test_schema_check_finds_a_misspelt_key_and_a_wrong_type(values):
    schema = read_yaml(Z2JH / "values.schema.yaml")
    assert schema_problems(planted(values, "singleuser.storage.homeMountpath", "/home"), schema)
    assert schema_problems(planted(values, "cull.timeout", "an hour"), schema)
    assert schema_problems(planted(values, "singleuser.culling", {}), schema)


def test_image_check_finds_another_tag_and_an_unpinned_base(values, dockerfile):
    assert image_problems(planted(values, "singleuser.image.tag", "0.2.0"), dockerfile)
    assert image_problems(
        planted(values, "singleuser.initContainers[0].image", "busybox"), dockerfile
    )
    latest = re.sub(r"minimal-notebook:\S+", "minimal-notebook:latest", dockerfile)
    assert image_problems(values, latest)


def test_install_check_finds_a_missing_extra_and_another_pyproject(dockerfile, manifest, tmp_path):
    assert install_problems(dockerfile.replace("[course]", ""), manifest)
    other = dict(manifest, **{"pyproject.toml": tmp_path / "pyproject.toml"})
    assert install_problems(dockerfile, other)


def test_settings_check_finds_the_kits_settings_missing(dockerfile, manifest):
    config_path = env(dockerfile, "JUPYTER_CONFIG_PATH")
    assert settings_problems(dockerfile.replace(config_path, "/etc/jupyter/elsewhere"), manifest)
    without = [
        line
        for line in dockerfile.splitlines()
        if not line.startswith("COPY --chown=${NB_UID}:${NB_GID} nbgrader")
    ]
    assert settings_problems("\n".join(without), manifest)
    no_jupyter = {name: path for name, path in manifest.items() if not name.startswith("jupyter/")}
    assert settings_problems(dockerfile, no_jupyter)


def test_exchange_check_finds_each_disagreement(values):
    claim = read_yaml(Z2JH / "exchange-pvc.yaml")
    assert exchange_problems(
        planted(values, "singleuser.extraEnv.NBGRADER_EXCHANGE", "/srv/exchange"), claim
    )
    assert exchange_problems(
        planted(values, "singleuser.storage.extraVolumeMounts[0].mountPath", "/mnt"), claim
    )
    assert exchange_problems(
        planted(values, "singleuser.initContainers[0].command", ["true"]), claim
    )
    once = copy.deepcopy(claim)
    once["spec"]["accessModes"] = ["ReadWriteOnce"]
    assert exchange_problems(values, once)
    renamed = copy.deepcopy(claim)
    renamed["metadata"]["name"] = "exchange"
    assert exchange_problems(values, renamed)


def test_secret_check_finds_a_client_secret(values):
    assert secret_problems(
        planted(values, "hub.config.GenericOAuthenticator.client_secret", "s3cret")
    )
    assert secret_problems(planted(values, "proxy.secretToken", "abc"))
    assert secret_problems(planted(values, "hub.services", {"grader": {"api_token": "abc"}}))


def test_staff_check_finds_the_student_settings_kept(values, dockerfile):
    student_path = env(dockerfile, "JUPYTER_CONFIG_PATH")
    key = f"hub.config.KubeSpawner.group_overrides.{STAFF_OVERRIDE}.spawner_override.environment"
    kept = planted(values, key, {"JUPYTER_CONFIG_PATH": student_path})
    assert staff_problems(kept, dockerfile)
    outsider = planted(
        values, f"hub.config.KubeSpawner.group_overrides.{STAFF_OVERRIDE}.groups", ["tas"]
    )
    assert staff_problems(outsider, dockerfile)
