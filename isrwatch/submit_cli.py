"""`isrwatch submit JOB [spark-submit options ...] [-- job options ...]`: a job under Spark's own spark-submit.

spark-submit from the pyspark wheel needs the venv's Python named (else "Could not find valid SPARK_HOME"), the
Delta jars and the two Delta settings; this fills them in and passes every other option through, so a job goes
to `--master spark://…` (or stays on `local[*]`) with one command. What the user gives wins: their `--jars` are
added to Delta's, their `--conf` for a key replaces the default, their `--driver-java-options` replace the quiet
log4j configuration. A lakehouse on an object store (the job's `--lakehouse`, else its settings file's) adds
Spark's S3A connector (jvm/s3) and the store's endpoint and credentials (foundation/object_store.py).

Stopping: spark-submit runs the Python driver as a child of its JVM, and a signal to the JVM ends Spark under the
driver (its query stops mid-batch). So the driver writes its process id to the file named by
ISRWATCH_DRIVER_PIDFILE (jobs/driver_signals.py), and SIGTERM or SIGINT to `isrwatch submit` is handed to the
driver as SIGINT: it lets the running micro-batch finish and stops its query, its checkpoint stays consistent,
and spark-submit exits after it (status 130). Before the driver has started, the signal ends spark-submit itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

from foundation.logs import logger
from foundation.object_store import ObjectStore

log = logger("submit")


ROOT = Path(__file__).resolve().parent.parent
JOBS = ("validate", "posture", "slo", "alerts")
LOG4J2_CONFIG = ROOT / "conf" / "log4j2.properties"
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
# spark-submit options that take no value (every other option it knows takes one).
_FLAGS = {"--verbose", "-v", "--supervise", "--help", "-h", "--version", "--kill", "--status"}


class SubmitError(ValueError):
    """Bad arguments to `isrwatch submit`."""


def add_submit_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "submit", add_help=False,
        help="run a job (validate, posture, slo, alerts) under spark-submit, Delta and the venv's Python filled in",
        description="isrwatch submit JOB [spark-submit options ...] [-- job options ...]")
    p.add_argument("rest", nargs=argparse.REMAINDER)


def split_arguments(argv: Sequence[str]) -> tuple[str, list[str], list[str]]:
    """(job, spark-submit options, job options) from `JOB [options ...] [-- job options ...]`."""
    if not argv or argv[0] in ("-h", "--help"):
        raise SubmitError(f"usage: isrwatch submit JOB [spark-submit options ...] [-- job options ...]; "
                          f"JOB is one of {', '.join(JOBS)}")
    job, rest = argv[0], list(argv[1:])
    if job not in JOBS:
        raise SubmitError(f"unknown job {job!r}: expected one of {', '.join(JOBS)}")
    if "--" in rest:
        cut = rest.index("--")
        return job, rest[:cut], rest[cut + 1:]
    return job, rest, []


def _options(spark_args: list[str]) -> tuple[list[tuple[str, str | None]], dict[str, str], list[str]]:
    """spark-submit options as (option, value) pairs, their --conf settings apart, and their --jars."""
    pairs: list[tuple[str, str | None]] = []
    conf: dict[str, str] = {}
    jars: list[str] = []
    i = 0
    while i < len(spark_args):
        arg = spark_args[i]
        if not arg.startswith("-"):
            raise SubmitError(f"{arg!r}: expected a spark-submit option (job options go after `--`)")
        name, eq, inline = arg.partition("=")
        if name in _FLAGS:
            pairs.append((arg, None))
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(spark_args):
            value = spark_args[i + 1]
            i += 2
        else:
            raise SubmitError(f"{arg}: missing its value")
        if name in ("--conf", "-c"):
            key, sep, setting = value.partition("=")
            if not sep or not key:
                raise SubmitError(f"--conf: expected KEY=VALUE, got {value!r}")
            conf[key] = setting
        elif name == "--jars":
            jars += [j for j in value.split(",") if j]
        else:
            pairs.append((name, value))
    return pairs, conf, jars


def _option(args: list[str], name: str) -> str | None:
    """The value of `name VALUE` or `name=VALUE` among a job's options (the last one given), else None."""
    value = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    return value


def lakehouse_of(job_args: list[str]) -> tuple[str, ObjectStore]:
    """The lakehouse the job will use (its --lakehouse, else its settings file's: --config, else the default) and
    the store it is on, as the job will read them."""
    from foundation.settings import load_settings

    settings = load_settings(_option(job_args, "--config"), {"lakehouse": _option(job_args, "--lakehouse")})
    return settings.lakehouse, settings.storage.object_store()


def write_credentials(folder: Path, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The object store's credentials from the environment as a Spark properties file only its owner can read
    (None: no credentials in the environment). Executors on a worker do not share the driver's environment."""

    confs = ObjectStore.credential_confs(environ)
    if not confs:
        return None
    path = folder / "credentials.properties"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.writelines(f"{key} {value}\n" for key, value in confs.items())
    return path


def spark_submit_command(job: str, spark_args: list[str], job_args: list[str], *,
                         python: str = sys.executable, credentials: Path | None = None) -> list[str]:
    """The spark-submit command line: the user's options, with Delta's jars and settings and the venv's Python
    added where the user did not set them (and S3A's, for a lakehouse on an object store, with the
    `credentials` file as extra properties: the secret is never on a command line)."""
    from foundation import object_store
    from foundation.spark import delta_jars, local_master_settings, s3_jars, with_local_master_settings

    pairs, conf, user_jars = _options(spark_args)
    store_jars: list[str] = []
    store_conf: dict[str, str] = {}
    lakehouse, store = lakehouse_of(job_args)
    on_store = object_store.is_object_store(lakehouse)
    if on_store:
        store_jars, store_conf = s3_jars(), store.spark_confs()
    named = {name for name, _ in pairs}
    master = dict(pairs).get("--master") or "local[*]"
    own_class_path = "--driver-class-path" in named or "spark.driver.extraClassPath" in conf
    local_master = {} if own_class_path else local_master_settings(master, on_store)
    settings = with_local_master_settings({**DELTA_CONF, **store_conf, "spark.pyspark.python": python,
                                           "spark.pyspark.driver.python": python, **conf}, local_master)
    cmd = [str(Path(python).parent / "spark-submit")]
    for name, value in pairs:
        cmd += [name] if value is None else [name, value]
    if "--master" not in named:
        cmd += ["--master", "local[*]"]
    if "--driver-java-options" not in named and "--verbose" not in job_args:
        cmd += ["--driver-java-options", f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"]
    cmd += ["--jars", ",".join([*delta_jars(), *store_jars, *user_jars])]
    if on_store and credentials is not None:
        # Loaded beside the user's --properties-file (or spark-defaults.conf), not instead of it.
        cmd += ["--extra-properties-file", str(credentials)]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(ROOT / "jobs" / f"{job}.py"), *job_args]


def main_submit(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="isrwatch-submit-") as tmp:
        try:
            job, spark_args, job_args = split_arguments(args.rest)
            cmd = spark_submit_command(job, spark_args, job_args, credentials=write_credentials(Path(tmp)))
        except SubmitError as e:
            log.error(f"isrwatch submit: {e}")
            return 2
        pidfile = Path(tmp) / "driver.pid"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "ISRWATCH_DRIVER_PIDFILE": str(pidfile)}
        log.info(f"isrwatch submit: {job}: {' '.join(cmd[:1] + spark_args)} …")
        # Its own session: a Ctrl-C in the terminal reaches only this process, which hands it to the driver;
        # the JVM, signalled too, would end Spark under the running micro-batch.
        proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        stopping = False

        def stop(signum: int, _frame: FrameType | None) -> None:
            nonlocal stopping
            driver = _driver_pid(pidfile)
            if driver is not None and not stopping:
                log.info(f"isrwatch submit: {signal.Signals(signum).name}: stopping the {job} query")
                os.kill(driver, signal.SIGINT)
            elif proc.poll() is None:
                proc.terminate()   # no driver yet (or asked twice): end spark-submit itself
            stopping = True

        previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = proc.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    return code


def _driver_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid
