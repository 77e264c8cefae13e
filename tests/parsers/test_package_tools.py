"""pip, apt and npm failures from real runs, offline (npm against a registry served on 127.0.0.1)."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from otel_errcompact.compactor import compact_text
from otel_errcompact.digest import Digest
from tests.realerrors import have, loopback_server, run, send_body

PIP = f"{sys.executable} -m pip"


def _fails(folder: Path, command: str | list[str], env: dict[str, str] | None = None) -> Digest:
    result = run(command, cwd=folder, shell=isinstance(command, str), env=env, timeout=180)
    assert result.returncode != 0, result.output
    line = command if isinstance(command, str) else " ".join(command)
    return compact_text(result.output, exit_code=result.returncode, command=line)


def test_pip_missing_distribution_after_satisfied_requirements(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("pytest\npydantic\nnosuchdistx\n")
    d = _fails(tmp_path, f"{PIP} install --no-index --disable-pip-version-check -r requirements.txt")
    assert (d.type, d.format) == ("pip", "pip")
    assert d.cause == "No matching distribution found for nosuchdistx"
    (tmp_path / "requirements.txt").write_text("nosuchdisty\n")
    other = _fails(tmp_path, f"{PIP} install --no-index --disable-pip-version-check -r requirements.txt")
    assert other.key != d.key


def test_pip_bad_requirement_file_and_line(tmp_path: Path) -> None:
    missing = _fails(tmp_path, f"{PIP} install --disable-pip-version-check -r dev.txt")
    assert "Could not open requirements file" in missing.cause and "'dev.txt'" in missing.cause
    invalid = _fails(tmp_path, f"{PIP} install --no-index --disable-pip-version-check 'flask=2.0'")
    # Newer pip releases add why after the requirement: "...: Expected end or semicolon (...)".
    assert invalid.cause.startswith("Invalid requirement: 'flask=2.0'"), invalid.cause


@pytest.mark.skipif(not have("apt-get"), reason="apt-get is not installed")
def test_apt_simulated_install_of_unknown_package(tmp_path: Path) -> None:
    one = _fails(tmp_path, "apt-get -s install libnosuch-dev")
    two = _fails(tmp_path, "apt-get -s -q install python3-nosuch")
    assert (one.type, one.cause) == ("apt", "Unable to locate package libnosuch-dev")
    assert one.key != two.key


PACKUMENTS = {
    "leftpad": {"1.0.0": {}},
    "widget": {"1.0.0": {}, "2.0.0": {}},
    "widget-plugin": {"1.0.0": {"widget": "^1.0.0"}},
}


class Registry(BaseHTTPRequestHandler):
    """Packuments for :data:`PACKUMENTS`, 404 for every other name: all npm needs to resolve a tree."""

    def do_GET(self) -> None:
        name = self.path.lstrip("/").split("?", 1)[0].replace("%2f", "/")
        versions = PACKUMENTS.get(name)
        doc = {"error": "Not found"} if versions is None else {
            "name": name, "dist-tags": {"latest": max(versions)},
            "versions": {v: {"name": name, "version": v, "peerDependencies": peers,
                             "dist": {"tarball": f"http://{self.headers['Host']}/{name}/-/{name}-{v}.tgz"}}
                         for v, peers in versions.items()}}
        send_body(self, 404 if versions is None else 200, json.dumps(doc).encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.skipif(not have("npm"), reason="npm is not installed")
def test_npm_e404_etarget_eresolve(tmp_path: Path) -> None:
    with loopback_server(Registry) as url:
        env = {"npm_config_registry": url + "/", "npm_config_cache": str(tmp_path / "cache"),
               "npm_config_audit": "false", "npm_config_fund": "false", "npm_config_update_notifier": "false"}
        app = tmp_path / "app"
        app.mkdir()
        (app / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0"}))
        e404 = _fails(app, ["npm", "install", "nosuch-pkgx"], env)
        etarget = _fails(app, ["npm", "install", "leftpad@9.9.9"], env)
        (app / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0",
                                                      "dependencies": {"widget": "2.0.0", "widget-plugin": "*"}}))
        eresolve = _fails(app, ["npm", "install"], env)
    assert e404.type == "npm E404" and "nosuch-pkgx" in e404.cause
    assert etarget.type == "npm ETARGET" and "leftpad@9.9.9" in etarget.cause
    assert eresolve.type == "npm ERESOLVE"
    assert 'peer widget@"^1.0.0" from widget-plugin@1.0.0' in eresolve.cause and "found widget@2.0.0" in eresolve.cause
    assert "A complete log" not in e404.line + etarget.line + eresolve.line


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal real wheel (metadata only), as a local index holds it."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    files = {
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/RECORD": "",
    }
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)


def test_pip_resolution_impossible_names_the_packages_and_the_conflict(tmp_path: Path) -> None:
    """pip's last line only links to its docs: the line above names the packages, and the lines under
    "The conflict is caused by:" say why. Conflicts between other packages are other classes."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "alpha", "1.0", ("beta<2",))
    _wheel(wheels, "delta", "1.0", ("beta>=2",))
    _wheel(wheels, "gamma", "1.0", ("beta<2",))
    for version in ("1.0", "2.0"):
        _wheel(wheels, "beta", version)
    pip = f"{PIP} install --dry-run --no-index --disable-pip-version-check --find-links {wheels}"
    d = _fails(tmp_path, f"{pip} alpha delta")
    assert d.cause.startswith("Cannot install alpha==1.0 and delta==1.0"), d.cause
    assert "alpha 1.0 depends on beta<2" in d.cause and "delta 1.0 depends on beta>=2" in d.cause, d.cause
    assert _fails(tmp_path, f"{pip} gamma delta").key != d.key


@pytest.mark.skipif(not have("npm"), reason="npm is not installed")
def test_npm_ebadengine_names_the_package_and_the_engine_it_requires(tmp_path: Path) -> None:
    digests = []
    for name, engines in (("webapp", {"node": ">=99"}), ("worker", {"npm": ">=99"})):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "package.json").write_text(json.dumps({"name": name, "version": "1.0.0", "engines": engines}))
        digests.append(_fails(folder, "npm install --offline --engine-strict --no-audit --no-fund",
                              env={"npm_config_cache": str(tmp_path / "cache")}))
    webapp, worker = digests
    assert webapp.type == "npm EBADENGINE", webapp.line
    assert webapp.cause == 'Not compatible with your version of node/npm: webapp@1.0.0; Required: {"node":">=99"}'
    assert webapp.key != worker.key


def test_pip_error_report_names_the_build_error_not_git(tmp_path: Path) -> None:
    """pip's error report (``error: metadata-generation-failed``, ``×`` lines, the build's own output
    indented under them): its code and the build's last ``error:`` line. Its ``hint:`` line is not git's."""
    digests = []
    for library in ("libpq", "libxml2"):
        package = tmp_path / library
        package.mkdir()
        (package / "setup.py").write_text(f"import sys\nsys.exit('error: {library} headers are required')\n")
        digests.append(_fails(tmp_path, f"{PIP} install --no-index --no-build-isolation --disable-pip-version-check "
                                        f"./{library}"))
    d = digests[0]
    assert (d.type, d.format) == ("pip", "pip"), d.line
    assert d.cause == "metadata-generation-failed: libpq headers are required", d.cause
    assert d.key != digests[1].key
