#!/usr/bin/env python3
"""Bootstrap Mailroom's virtual environment and run it: `python3 tasks.py demo` or `python3 tasks.py test`.

Needs nothing but Python 3.11+ and git. The environment lives in `.venv/`, holds the versions
`requirements.lock` names, and is rebuilt whenever `pyproject.toml` or the lock file changes.
`python3 tasks.py lock` writes the lock file anew from the environment.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import venv
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".mailroom-deps"
LOCK = ROOT / "requirements.lock"
# The distribution's name before it became pyproject's (another project holds "mailroom" on the index).
OLD_DISTRIBUTION = "mailroom"


def _say(message: str) -> None:
    print(f"[tasks] {message}", flush=True)


def _run(*args: str | Path, cwd: Path = ROOT, allowed: tuple[int, ...] = (0,)) -> None:
    result = subprocess.run([str(a) for a in args], cwd=cwd, check=False)
    if result.returncode not in allowed:
        sys.exit(result.returncode)


def ensure_venv() -> None:
    """Create `.venv` and install Mailroom with its dev extras when missing or stale."""
    if sys.version_info < (3, 11):
        sys.exit("Mailroom needs Python 3.11 or newer.")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + LOCK.read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        return
    if not PYTHON.exists():
        _say(f"creating virtual environment in {VENV.name}/")
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    _say("installing Mailroom and its dependencies (first run takes a minute)")
    stale = f"site-packages/{OLD_DISTRIBUTION}-*.dist-info"
    if any(VENV.glob(f"lib/python*/{stale}")) or any(VENV.glob(f"Lib/{stale}")):
        # An environment made before the rename: its editable install under the old name goes first.
        _run(PYTHON, "-m", "pip", "uninstall", "-y", "-qq", "--disable-pip-version-check", OLD_DISTRIBUTION)
    _pip(PYTHON, "-e", ".[dev]")
    STAMP.write_text(wanted)


_PIP_INSTALL = ("install", "-qq", "--disable-pip-version-check")


def _pip(python: Path, *requirements: str) -> None:
    """Install into the environment of `python`, held to the versions of the lock file."""
    _run(python, "-m", "pip", *_PIP_INSTALL, "-c", LOCK, *requirements)


def _canonical(name: str) -> str:
    """A distribution's name as the package index compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution() -> str:
    """The project's distribution name, from pyproject.toml (not the import name `mailroom`)."""
    import tomllib  # 3.11+: after ensure_venv's version check

    return str(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"])


def lock() -> None:
    """Write requirements.lock from the environment (after changing a dependency range)."""
    ensure_venv()
    frozen = subprocess.run(
        [str(PYTHON), "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    # The project itself is no dependency (--exclude-editable leaves out its editable install already).
    own = {_canonical(distribution()), _canonical(OLD_DISTRIBUTION)}
    lines = [
        line
        for line in frozen.splitlines()
        if line and _canonical(re.split(r"[\s=@<>!~;\[]", line)[0]) not in own
    ]
    LOCK.write_text(
        "# The versions the test and demo environments use: python3 tasks.py lock\n" + "\n".join(lines) + "\n"
    )
    _say(f"wrote {LOCK.name}: {len(lines)} packages")


class _Beside:
    """Commands run one after another on a thread, beside what the main thread runs (the 2-core CI
    machine's unit tier uses one core; pip mostly waits on the network and the disk). Their output
    is held and printed when they are waited for, so it never interleaves with pytest's; the first
    that fails ends the chain, and `wait` exits with its status."""

    def __init__(self, steps: list[tuple[str, list[str | Path], Path]]) -> None:
        self.steps = steps
        self.done: list[tuple[str, bytes]] = []
        self.code = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.reported = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="tasks-beside", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        for title, args, cwd in self.steps:
            with self.lock:
                if self.stopping:
                    return
                process = self.process = subprocess.Popen(
                    [str(a) for a in args],
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            output, _ = process.communicate()
            self.done.append((title, output))
            if process.returncode:
                self.code = process.returncode
                return

    def wait(self) -> None:
        """Wait for the chain, print what each command said (once), and exit if one failed."""
        self.thread.join()
        if self.reported:
            return
        self.reported = True
        for title, output in self.done:
            _say(title)
            sys.stdout.buffer.write(output)
            sys.stdout.flush()
        if self.code:
            sys.exit(self.code)

    def stop(self) -> None:
        """Stop the chain early (a phase before it failed): the running command is killed."""
        with self.lock:
            self.stopping = True
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
        self.thread.join()


def _smoke_prepare(work: Path) -> _Beside:
    """Build the wheel now, then install it with `[all]` into a fresh environment in `work`, beside
    the next phases. The build runs first and alone: it writes build/ and the egg-info into the checkout."""
    ensure_venv()
    _say("building the wheel")
    _run(
        PYTHON,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--disable-pip-version-check",
        "-w",
        work / "dist",
        ROOT,
    )
    name = distribution()
    # A wheel's file name spells the distribution with underscores: mailroom_pg-0.1.0-py3-none-any.whl.
    wheel = next((work / "dist").glob(f"{_canonical(name).replace('-', '_')}-*.whl"))
    python = work / "venv" / BIN.name / PYTHON.name
    # Run from a copy outside the checkout: the script's folder leads sys.path, and tests/ has a worker/.
    (work / "wheel_smoke.py").write_bytes((ROOT / "tests" / "wheel_smoke.py").read_bytes())
    install = f"installing {wheel.name}[all] into a fresh environment"
    return _Beside(
        [
            (f"{install}: the environment", [sys.executable, "-m", "venv", work / "venv"], work),
            (
                install,
                [python, "-m", "pip", *_PIP_INSTALL, "-c", LOCK, f"{name}[all] @ {wheel.as_uri()}"],
                work,
            ),
        ]
    )


def _smoke_finish(work: Path, installing: _Beside) -> None:
    """Wait for the fresh environment, then try the wheel in it from outside the checkout."""
    installing.wait()
    _say("wheel smoke")
    _run(work / "venv" / BIN.name / PYTHON.name, work / "wheel_smoke.py", cwd=work)


def wheel_smoke() -> None:
    """Build the wheel, install it (not editable) into a fresh environment and try it from outside the checkout."""
    with tempfile.TemporaryDirectory(prefix="mailroom-wheel-") as tmp:
        work = Path(tmp)
        _smoke_finish(work, _smoke_prepare(work))


def build_docs() -> None:
    """Build the documentation site with `--strict`: a broken link or a page left out of the nav fails."""
    # Material prints a banner about its successor on every build; the check needs only the warnings.
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    with tempfile.TemporaryDirectory(prefix="mailroom-site-") as tmp:
        _run(*_DOCS_BUILD, tmp)


_DOCS_BUILD = (BIN / "mkdocs", "build", "--strict", "--quiet", "--site-dir")


# Real tools some tests run against, from Debian's packages: command -> package. Installed by the test
# command when it runs as root where apt-get exists (CI); elsewhere the tests that need one say how.
# PostgreSQL 15's server is not on PATH (Debian keeps it in its versioned directory): named by path.
SYSTEM_TOOLS = {
    "spamassassin": "spamassassin",
    "promtool": "prometheus",
    "chromium": "chromium",
    "pgbouncer": "pgbouncer",
    "/usr/lib/postgresql/15/bin/postgres": "postgresql-15",
}


def ensure_system_tools() -> None:
    """Install the Debian packages of SYSTEM_TOOLS that are missing, when this process may."""
    missing = sorted({package for tool, package in SYSTEM_TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("apt-get") is None:
        _say(f"not installing {', '.join(missing)} (needs root and apt-get); the tests that use them say how")
        return
    _say(f"installing {', '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    quiet = {"stdout": subprocess.DEVNULL, "env": env, "check": False}
    subprocess.run(["apt-get", "update", "-qq"], **quiet)  # type: ignore[call-overload]
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], **quiet)  # type: ignore[call-overload]


# What ruff checks and formats (docs/hooks, not docs/: ruff would reformat the Markdown's code blocks).
LINTED = ("worker", "console", "migrations", "tests", "bench", "mailroom", "docs/hooks", "tasks.py")


def test(extra: list[str]) -> None:
    """Lint, type-check, check the architecture contract, then run the whole test suite.

    On the 2-core CI machine the phases overlap where they can: the wheel's fresh environment is
    installed from the start (pip waits on the network and the disk), and mypy, import-linter and the
    docs site are checked beside the unit tier (one process). Their failures stop the run before the
    integration tier, and their output is printed whole, after the unit tier's."""
    ensure_venv()
    with tempfile.TemporaryDirectory(prefix="mailroom-wheel-") as tmp:
        work = Path(tmp)
        smoke = _smoke_prepare(work)
        static: _Beside | None = None
        try:
            _say("ruff")
            _run(BIN / "ruff", "check", *LINTED)
            _run(BIN / "ruff", "format", "--check", *LINTED)
            _say(
                "mypy --strict, import-linter and the docs site (mkdocs build --strict), beside the unit tier"
            )
            site = Path(tmp) / "site"
            static = _Beside(
                [
                    ("mypy --strict", [BIN / "mypy"], ROOT),
                    ("import-linter", [BIN / "lint-imports"], ROOT),
                    ("docs site (mkdocs build --strict)", [*_DOCS_BUILD, site], ROOT),
                ]
            )
            ensure_system_tools()
            _pytest(extra, before_integration=static.wait)
            _smoke_finish(work, smoke)
        finally:
            # A phase that failed leaves the others nothing to do: stop them before the folder goes.
            if static is not None:
                static.stop()
            smoke.stop()


def _pytest(extra: list[str], before_integration: Callable[[], None] = lambda: None) -> None:
    """The unit tier without the database plugin (fails fast, and proves it needs no PostgreSQL), then the rest.

    Test paths among the arguments (`tasks.py test tests/worker/test_cli.py -x`) run just those, in one go.
    """
    numprocesses = ("-n", "--numprocesses")
    # One process per core, up to four, each with its own embedded PostgreSQL, or its own template and
    # databases on the server of MAILROOM_TEST_DATABASE_URL (tests/fixtures_db.py); any -n/--numprocesses
    # given (`-n 0`: one process) overrides it.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    processes = min(4, cores)
    parallel = extra
    if processes > 1 and not any(a.startswith(numprocesses) for a in extra):
        # worksteal: a process that runs out of tests takes some of the other's, so the long end-to-end
        # tests do not leave one core idle at the end (the integration tier: 266 s against 331 s).
        parallel = ["-n", str(processes), "--dist", "worksteal", *extra]
    if any(not a.startswith("-") and (ROOT / a.split("::")[0]).exists() for a in extra):
        before_integration()
        _say("pytest (the tests named)")
        _run(PYTHON, "-m", "pytest", *parallel)
        return
    _say("pytest: unit tier, without PostgreSQL")
    options = [a for i, a in enumerate(extra) if not a.startswith(numprocesses) and not _is_n_value(extra, i)]
    # Exit status 5 (nothing collected) is no failure here: `-m e2e` or `-k` may leave the unit tier empty.
    unit = ["tests/unit", "-p", "no:tests.fixtures_db", "-p", "no:tests.fixtures_smtp", *options]
    _run(PYTHON, "-m", "pytest", *unit, allowed=(0, 5))
    before_integration()
    _say(
        "pytest: integration and end to end" + (f" ({processes} processes)" if parallel is not extra else "")
    )
    _run(PYTHON, "-m", "pytest", "--ignore=tests/unit", *parallel)


def _is_n_value(args: list[str], i: int) -> bool:
    """Whether args[i] is the value of a separate `-n`/`--numprocesses` option before it."""
    return i > 0 and args[i - 1] in ("-n", "--numprocesses")


def main() -> None:
    """Dispatch `test`, `demo` or any other `mailroom` subcommand inside the virtual environment."""
    args = sys.argv[1:]
    if not args or args[0] in {"-h", "--help"}:
        print(__doc__)
        print("usage: python3 tasks.py test [PYTEST ARGS] | demo | mailroom ARGS | wheel-smoke | lock")
        return
    command, rest = args[0], args[1:]
    if command == "test":
        test(rest)
    elif command == "demo":
        ensure_venv()
        os.execv(str(BIN / "mailroom"), [str(BIN / "mailroom"), "demo", *rest])
    elif command == "wheel-smoke":
        wheel_smoke()
    elif command == "lock":
        lock()
    elif command == "mailroom":
        ensure_venv()
        os.execv(str(BIN / "mailroom"), [str(BIN / "mailroom"), *rest])
    else:
        sys.exit(f"unknown task {command!r}; try: test, demo, mailroom, wheel-smoke, lock")


if __name__ == "__main__":
    main()
