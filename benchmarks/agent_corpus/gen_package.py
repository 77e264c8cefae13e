"""apt, pip and npm errors from real runs, offline. Run: ``python gen_package.py``.

- apt: simulated installs (``apt-get -s``: no lock taken) of names that cannot be installed, and an
  ``apt-get update`` against a source list whose host cannot resolve, with lists kept in a temp folder.
- pip: ``pip install --no-index`` (nothing is fetched) of missing distributions, bad requirement lines,
  missing requirement files and folders that are not projects.
- npm: the real npm client against a registry served on 127.0.0.1 by this script (packuments only), for
  E404, ETARGET and ERESOLVE; and offline errors (a missing script, a broken package.json).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from _gen import Record, Run, run, sh, write_family

from tests.realerrors import send_body

FAMILY = "package"
REPEATS = 4

# The loopback registry: name -> {version: peerDependencies}
PACKAGES: dict[str, dict[str, dict[str, str]]] = {
    "leftpad": {"1.0.0": {}, "1.1.0": {}},
    "widget": {"1.0.0": {}, "2.0.0": {}},
    "widget-plugin": {"1.0.0": {"widget": "^1.0.0"}},
    "gadget": {"3.0.0": {}, "4.0.0": {}},
    "gadget-theme": {"1.2.0": {"gadget": "^3.0.0"}},
}


INSTALLED = ["pydantic", "httpx", "tenacity", "redis", "requests", "tiktoken", "matplotlib", "django", "flake8",
             "datasette", "openai", "anthropic", "pytest", "mypy", "ruff", "jinja2"]


class Registry(BaseHTTPRequestHandler):
    """Serve packuments for :data:`PACKAGES`; 404 for every other name."""

    def do_GET(self) -> None:
        name = unquote(self.path.lstrip("/").split("?", 1)[0])
        versions = PACKAGES.get(name)
        if versions is None:
            status, body = 404, json.dumps({"error": "Not found"}).encode()
        else:
            base = f"http://{self.headers['Host']}/{name}/-/{name}"
            doc = {
                "name": name,
                "dist-tags": {"latest": max(versions)},
                "versions": {
                    v: {"name": name, "version": v, "peerDependencies": peers,
                        "dist": {"tarball": f"{base}-{v}.tgz"}}
                    for v, peers in versions.items()
                },
            }
            status, body = 200, json.dumps(doc).encode()
        send_body(self, status, body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    records: list[Record] = []

    def add(name: str, fmt: str, label: str, result: Run, tokens: list[str], source: str) -> None:
        assert result.returncode != 0, (name, result)
        records.append(Record(f"{FAMILY}/{name}", fmt, source, result.output, label, tokens,
                              result.returncode, result.command))

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    registry = f"http://127.0.0.1:{httpd.server_address[1]}/"
    pip = "python -m pip"
    os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    apt_flags = ("-s", "-s -y", "-s --no-install-recommends", "-q -s")
    try:
        for i in range(REPEATS):
            with tempfile.TemporaryDirectory() as tmp:
                d = Path(tmp)
                flags = apt_flags[i % len(apt_flags)]
                for pkg in ("libfoo-dev", "python3-nosuch"):
                    add(f"apt-locate-{pkg}-{i}", "apt", f"apt-locate-{pkg}", sh(f"apt-get {flags} install {pkg}", d),
                        [pkg, "Unable to locate package"], "apt-get -s install of an unknown package")
                for pkg, ver in (("bash", "0.0.1"), ("coreutils", "0.0.1")):
                    add(f"apt-version-{pkg}-{i}", "apt", f"apt-version-{pkg}",
                        sh(f"apt-get {flags} install {pkg}={ver}", d), [pkg, ver, "was not found"],
                        "apt-get -s install of a version that does not exist")
                add(f"apt-no-candidate-{i}", "apt", "apt-no-candidate-python", sh(f"apt-get {flags} install python", d),
                    ["'python'", "no installation candidate"], "apt-get -s install of a virtual package")
                for host in ("mirror-a.example.invalid", "mirror-b.example.invalid"):
                    (d / "lists" / "partial").mkdir(parents=True, exist_ok=True)
                    (d / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
                    (d / "sources.list").write_text(f"deb http://{host}/debian bookworm main\n")
                    cmd = (f"apt-get -o Dir::Etc::sourcelist={d}/sources.list -o Dir::Etc::sourceparts=/nonexistent "
                           f"-o Dir::State::Lists={d}/lists -o Dir::Cache={d}/cache -o Debug::NoLocking=1 update "
                           f"&& apt-get -s install libfoo{i}-dev")
                    add(f"apt-resolve-{host.split('.')[0]}-{i}", "apt", f"apt-resolve-{host}", sh(cmd, d),
                        [host, "Could not resolve"], "apt-get update with a source whose host does not resolve")

                for pkg in ("fastjsonx", "torchvisionx"):
                    # A project's requirements: the ones already installed are listed before the failure.
                    (d / "requirements.txt").write_text("\n".join([*INSTALLED[: 4 + 3 * i], pkg]) + "\n")
                    add(f"pip-no-dist-{pkg}-{i}", "pip", f"pip-no-dist-{pkg}",
                        sh(f"{pip} install --no-index --disable-pip-version-check -r requirements.txt", d),
                        [pkg, "No matching distribution"], "pip install --no-index of a missing distribution")
                for req in (f"requirements-{i}.txt", f"dev-{i}.txt"):
                    kind = req.split("-")[0]
                    add(f"pip-no-reqfile-{kind}-{i}", "pip", f"pip-no-reqfile-{kind}",
                        sh(f"{pip} install --disable-pip-version-check -r {req}", d),
                        [req, "Could not open requirements file"], "pip install -r of a missing file")
                for bad in ("requests@@2.0", "flask=2.0"):
                    add(f"pip-invalid-{re.split('[@=]', bad)[0]}-{i}", "pip", f"pip-invalid-{bad}",
                        sh(f"{pip} install --no-index --disable-pip-version-check '{bad}'", d),
                        [bad, "Invalid requirement"], "pip install of a malformed requirement")
                (d / "proj").mkdir()
                (d / "proj" / f"notes{i}.txt").write_text(f"draft {i}\n")
                extra = ("", " -q", " --no-deps", " --user")[i % 4]
                add(f"pip-not-installable-{i}", "pip", "pip-not-installable",
                    sh(f"{pip} install{extra} --no-index --disable-pip-version-check ./proj", d),
                    ["./proj", "is not installable"], "pip install of a folder with no project file")

                npm_env = {"npm_config_registry": registry, "npm_config_cache": str(d / "npm-cache"),
                           "npm_config_audit": "false", "npm_config_fund": "false",
                           "npm_config_update_notifier": "false", "npm_config_loglevel": "error"}
                app = d / "app"
                app.mkdir()
                (app / "package.json").write_text(json.dumps({"name": f"app{i}", "version": f"0.{i}.0",
                                                              "scripts": {"build": "echo build"}}))
                for pkg in ("left-padx", "react-domx"):
                    add(f"npm-e404-{pkg}-{i}", "npm", f"npm-e404-{pkg}",
                        run(["npm", "install", pkg], app, env=npm_env), [pkg, "E404"],
                        "npm install of a name the registry does not have")
                for spec in ("leftpad@9.9.9", "gadget@5.0.0"):
                    add(f"npm-etarget-{spec.split('@')[0]}-{i}", "npm", f"npm-etarget-{spec}",
                        run(["npm", "install", spec], app, env=npm_env), [spec, "ETARGET"],
                        "npm install of a version the registry does not have")
                for base, plugin, want in (("widget", "widget-plugin", "2.0.0"), ("gadget", "gadget-theme", "4.0.0")):
                    proj = d / f"{base}-proj"
                    proj.mkdir()
                    (proj / "package.json").write_text(json.dumps({
                        "name": f"proj{i}", "version": f"1.{i}.0",
                        "dependencies": {base: want, plugin: "*"}}))
                    add(f"npm-eresolve-{base}-{i}", "npm", f"npm-eresolve-{base}",
                        run(["npm", "install"], proj, env=npm_env), ["ERESOLVE", f"{base}@{want}", plugin],
                        "npm install with a peer dependency conflict")
                for script in ("bild", "tests"):
                    add(f"npm-missing-script-{script}-{i}", "npm", f"npm-missing-script-{script}",
                        run(["npm", "run", script], app, env=npm_env), [f'"{script}"', "Missing script"],
                        "npm run of a script package.json lacks")
                broken = d / "broken"
                broken.mkdir()
                (broken / "package.json").write_text('{"name": "broken", "version": "1.0.0", "main": }')
                verb = (["install"], ["install", "--no-save"], ["install", "--ignore-scripts"],
                        ["install", "--prefer-offline"])[i % 4]
                add(f"npm-ejsonparse-{i}", "npm", "npm-ejsonparse", run(["npm", *verb], broken, env=npm_env),
                    ["EJSONPARSE"], "npm install with a malformed package.json")
    finally:
        httpd.shutdown()

    def rid(prefix: str, i: int = 0) -> str:
        return f"{FAMILY}/{prefix}-{i}"

    pairs = [(rid("apt-locate-libfoo-dev"), rid("apt-locate-python3-nosuch"), "package differs"),
             (rid("apt-version-bash", 1), rid("apt-version-coreutils", 1), "package differs"),
             (rid("apt-resolve-mirror-a"), rid("apt-resolve-mirror-b"), "host differs"),
             (rid("pip-no-dist-fastjsonx"), rid("pip-no-dist-torchvisionx"), "distribution differs"),
             (rid("pip-no-reqfile-requirements", 2), rid("pip-no-reqfile-dev", 2), "file differs"),
             (rid("pip-invalid-requests"), rid("pip-invalid-flask"), "requirement differs"),
             (rid("npm-e404-left-padx"), rid("npm-e404-react-domx"), "package differs"),
             (rid("npm-etarget-leftpad", 3), rid("npm-etarget-gadget", 3), "package differs"),
             (rid("npm-eresolve-widget"), rid("npm-eresolve-gadget"), "conflicting packages differ"),
             (rid("npm-missing-script-bild"), rid("npm-missing-script-tests"), "script differs")]
    write_family(FAMILY, records, pairs)


if __name__ == "__main__":
    main()
