"""The one place that builds a SparkSession: Delta Lake from the locally fetched jars, quiet, local.

Quiet: a driver JVM started here logs with conf/log4j2.properties (errors only) from its first line, a
local driver binds to 127.0.0.1 (no 'hostname resolves to a loopback address' warning), and py4j's and Great
Expectations' Python loggers show errors only. `verbose=True` keeps Spark's and the libraries' own logging.
The user's own logging configuration always wins (see `user_log4j_config`); under spark-submit the JVM was
started before any of this runs, so only the log level of a driver on Spark's default profile is lowered.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from foundation import object_store
from foundation.logs import not_ours

ROOT = Path(__file__).resolve().parent.parent
JARS_DIR = ROOT / "jvm" / "jars"
S3_JARS_DIR = ROOT / "jvm" / "s3" / "jars"
LOG4J2_CONFIG = ROOT / "conf" / "log4j2.properties"

# Python loggers of the libraries a Spark run goes through: errors only unless verbose.
QUIET_PYTHON_LOGGERS = ("py4j", "great_expectations")
# A log4j configuration named on a JVM command line (log4j 2's two property names, log4j 1's).
_LOG4J_OPTION = re.compile(r"-Dlog4j2?\.configurationFile=|-Dlog4j\.configuration=")
# What the JDK prints at start-up for the `--add-modules=jdk.incubator.vector` that Spark's launcher adds to
# every driver command after the user's options (JavaModuleOptions); no JVM option turns it off.
_INCUBATOR_WARNING = b"WARNING: Using incubator modules: jdk.incubator.vector"


def delta_jars() -> list[str]:
    jars = sorted(str(p) for p in JARS_DIR.glob("*.jar"))
    if not any("delta-spark" in j for j in jars):
        raise RuntimeError(f"Delta Lake jars not found in {JARS_DIR}: run `make jars`")
    return jars


LOCAL_MASTER_JAR = ROOT / "jvm" / "local-master" / "isrwatch-local-master.jar"
# The classes a local driver loads from its class path, parsed and verified once (`make jars`, foundation/
# class_archive.py) and mapped by every later JVM: a session starts and runs its first job in ~60 % of the time.
CLASS_ARCHIVE = ROOT / "jvm" / "local-master" / "spark-classes.jsa"
LOCAL_FS_CLASS = "isrwatch.hadoop.NioLocalFileSystem"
PRIORITY_PLUGIN = "isrwatch.spark.ThroughputWorkAtLowPriority"
JAVA_OPTIONS = "spark.driver.defaultJavaOptions"


def class_archive_options(archive: Path) -> str:
    """The JVM options that map `archive`. The JDK checks it against the class path and the JVM's own build and,
    where it does not match (a jar rebuilt since), starts without it: silently, with its `cds` logging off."""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def with_local_master_settings(settings: Mapping[str, str], local: Mapping[str, str]) -> dict[str, str]:
    """`settings` with `local_master_settings` added where the caller did not set them; the caller's JVM options
    come after ours (the later option wins)."""
    merged = {**local, **settings}
    if JAVA_OPTIONS in local and JAVA_OPTIONS in settings:
        merged[JAVA_OPTIONS] = f"{local[JAVA_OPTIONS]} {settings[JAVA_OPTIONS]}"
    return merged


def local_master_settings(master: str, on_store: bool) -> dict[str, str]:
    """jvm/local-master's classes, for a local master (whose executor is the driver's JVM) with the jar built
    (`make jars`); otherwise Spark's and Hadoop's defaults. The classes must be on the driver's class path when the JVM
    starts (spark-submit itself reads the jars through Hadoop's file system).

    - Hadoop's `file:` file system, setting permissions through java.nio instead of forking `chmod` for every file it
      creates (Hadoop's native library, which would avoid that, is not in pyspark): a streaming micro-batch's offset
      and commit log entries forked it four times, walCommit + commitOffsets took 27 ms on an idle machine and ~60 ms
      in the alert latency bench, 5 ms idle this way. Not for a lakehouse on an object store.
    - Spark's tasks and the JIT compiler's threads at a lower CPU priority than the driver's other threads
      (`spark.plugins`): the alert lane's batches run on the driver and wait for a core while a validate batch's tasks,
      or the compiler, hold both (docs/benchmarks.md). The JVM creates its compiler threads at its start (not on
      demand), so that the plugin finds them all.
    - The driver JVM maps `CLASS_ARCHIVE`, once built."""
    if not master.startswith("local") or not LOCAL_MASTER_JAR.exists():
        return {}
    settings = {"spark.driver.extraClassPath": str(LOCAL_MASTER_JAR), "spark.plugins": PRIORITY_PLUGIN}
    if not on_store:
        settings["spark.hadoop.fs.file.impl"] = LOCAL_FS_CLASS
    options = ["-XX:-UseDynamicNumberOfCompilerThreads"]
    if CLASS_ARCHIVE.exists():
        options.append(class_archive_options(CLASS_ARCHIVE))
    settings[JAVA_OPTIONS] = " ".join(options)
    return settings


def lower_calling_stream_thread(spark: SparkSession) -> None:
    """From a foreachBatch body: the JVM thread that called it (py4j pins a callback's calls to the calling thread,
    here the query's stream execution thread) and the threads it starts go behind the driver's other threads, as
    Spark's tasks do, where the session's driver runs jvm/local-master's plugin (a local master with the jar built);
    elsewhere nothing changes. Once per thread: a later call costs two py4j calls."""
    if PRIORITY_PLUGIN in (spark.conf.get("spark.plugins", "") or "").split(","):
        jvm: Any = spark.sparkContext._jvm
        jvm.isrwatch.spark.ThroughputWorkAtLowPriority.lowerCallingThread()


def s3_jars() -> list[str]:
    """Spark's S3A connector, for a lakehouse on an object store (foundation/object_store.py)."""
    jars = sorted(str(p) for p in S3_JARS_DIR.glob("*.jar"))
    if not any("hadoop-aws" in j for j in jars):
        raise RuntimeError(f"the S3A connector's jars are not in {S3_JARS_DIR}: run `make s3-jars`")
    return jars


def launched_by_spark_submit() -> bool:
    """True inside a driver started by `spark-submit` (its JVM hands Python a gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _spark_conf_dir(environ: Mapping[str, str]) -> Path | None:
    """The folder spark-submit puts on the driver's class path (where log4j 2 would find a log4j2.properties)."""
    if environ.get("SPARK_CONF_DIR"):
        return Path(environ["SPARK_CONF_DIR"])
    try:
        from pyspark.find_spark_home import _find_spark_home

        return Path(_find_spark_home()) / "conf"
    except Exception:  # no Spark home found: pyspark's own launch would fail the same way
        return None


def user_log4j_config(settings: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> str | None:
    """Where the user configured the driver's log4j themselves (theirs then wins over ours), else None."""
    for key in ("spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions"):
        if _LOG4J_OPTION.search(settings.get(key, "")):
            return key
    for var in ("PYSPARK_SUBMIT_ARGS", "SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):
        if _LOG4J_OPTION.search(environ.get(var, "")):
            return var
    if environ.get("LOG4J_CONFIGURATION_FILE"):
        return "LOG4J_CONFIGURATION_FILE"
    conf_dir = _spark_conf_dir(environ)
    if conf_dir is not None and conf_dir.is_dir():
        found = sorted(p for p in conf_dir.glob("log4j2*") if p.suffix in (".properties", ".xml", ".json", ".yaml",
                                                                             ".yml"))
        if found:
            return str(found[0])
    return None


def with_quiet_log4j(settings: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The settings of a driver JVM this process starts, with conf/log4j2.properties prepended to
    `spark.driver.defaultJavaOptions` (a -D in the user's extraJavaOptions or --driver-java-options comes later
    on the java command line and wins); unchanged when the user configured log4j some other way."""
    settings = dict(settings)
    if user_log4j_config(settings, environ) is None:
        option = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"
        if " " in option:
            option = f'"{option}"'
        theirs = settings.get("spark.driver.defaultJavaOptions", "")
        settings["spark.driver.defaultJavaOptions"] = f"{option} {theirs}".strip()
    return settings


def local_driver_env(settings: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """SPARK_LOCAL_IP=127.0.0.1 for a local master's driver (it serves only this machine; and no warning that
    the hostname resolves to a loopback address), unless the user chose the driver's address."""
    chosen = any(environ.get(v) for v in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")) or any(
        k in settings for k in ("spark.driver.host", "spark.driver.bindAddress"))
    return {} if chosen or not settings.get("spark.master", "").startswith("local") else {"SPARK_LOCAL_IP": "127.0.0.1"}


def quiet_python_loggers(verbose: bool) -> None:
    """py4j's and Great Expectations' loggers: errors only, or (verbose) warnings too, like Spark's default,
    each line naming its logger (INFO would add hundreds of Great Expectations' start-up lines)."""
    if verbose:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        for handler in logging.getLogger().handlers:
            handler.addFilter(not_ours)
        for name in QUIET_PYTHON_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
    else:
        for name in QUIET_PYTHON_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)


def _forward_stderr(read_fd: int) -> None:
    """The driver JVM's stderr, passed on to ours line by line, but for the JDK's incubator-module warning
    among its first lines (printed before any of the JVM's own configuration applies). Reads to the end even
    when our stderr is gone, so the JVM never blocks on a full pipe."""
    ours_open = True
    with os.fdopen(read_fd, "rb") as pipe:
        for n, line in enumerate(pipe):
            if not ours_open or (n < 5 and line.rstrip() == _INCUBATOR_WARNING):
                continue
            try:
                while line:
                    line = line[os.write(2, line):]
            except OSError:  # e.g. a closed pipe: what the JVM would have got writing there itself
                ours_open = False


@contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _launch_jvm(settings: Mapping[str, str], env: Mapping[str, str], *, quiet: bool) -> None:
    """Start the driver JVM as pyspark does (spark-submit with `settings` as its --conf), with `env` added and,
    when quiet, its stderr forwarded by `_forward_stderr`; the SparkContext built next uses this gateway."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf()
    for key, value in settings.items():
        conf.set(key, value)
    if not quiet:
        with _environment(env):
            SparkContext._ensure_initialized(gateway=launch_gateway(conf))
        return
    read_fd, write_fd = os.pipe()
    threading.Thread(target=_forward_stderr, args=(read_fd,), name="driver-jvm-stderr", daemon=True).start()
    try:
        with _environment(env):
            gateway = launch_gateway(conf, popen_kwargs={"stderr": write_fd})
    finally:
        os.close(write_fd)  # the JVM has its own copy: the forwarder ends when the JVM does
    SparkContext._ensure_initialized(gateway=gateway)


def _spark_default_logging(spark: SparkSession) -> bool:
    """True when the driver logs with Spark's default profile or ours (not a configuration of the user's)."""
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        source = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration().getConfigurationSource()
        location = str(source.getLocation() or source.getURL() or "")
    except Exception:  # not log4j 2's core underneath: leave the level alone
        return False
    return location.endswith(("log4j2-defaults.properties", "log4j2-json-layout.properties", str(LOG4J2_CONFIG)))


def build_spark_session(app_name: str, *, master: str | None = None, conf: dict[str, str] | None = None,
                        ui: bool = False, verbose: bool = False, lakehouse: str | None = None) -> SparkSession:
    """A SparkSession with Delta configured; `conf` overrides every default. Quiet unless `verbose`. A
    `lakehouse` on an object store adds the S3A connector and the store's settings."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    quiet_python_loggers(verbose)
    settings = {
        "spark.jars": ",".join(delta_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": str(ui).lower(),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
        "spark.ui.showConsoleProgress": "false",
        # toPandas through Arrow (GE's pandas engine validates each micro-batch on the driver).
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Delta reconstructs a table's state (its files, its app transactions) with a Spark job of
        # `snapshotPartitions` tasks; the default 50 costs ~100 tasks per idempotent write on 2 cores,
        # 2 costs a few. Raise it on a cluster with large tables.
        "spark.databricks.delta.snapshotPartitions": "2",
        # Auto compaction would run inside a micro-batch and make its duration spiky; the jobs compact
        # their own tables every `maintain_every_batches` instead (OPTIMIZE + checkpoint + VACUUM).
        "spark.databricks.delta.autoCompact.enabled": "false",
        # Streaming state (validate's de-duplication) in RocksDB, off the JVM heap and spilled to local disk:
        # the state holds every key ingested within `dedup_window` of wall time, which in a catch-up is
        # millions of rows; Spark's default in-heap store keeps whole copies per version and ran a 4 GB driver
        # out of memory ten minutes into a day's catch-up. Changelog checkpointing commits only each batch's
        # changes. A checkpoint keeps the provider it was started with (Spark records it in the offset log).
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Counting the store's rows costs a RocksDB read before every write; nothing reads the count (the
        # query progress's numRowsTotal), and a 10M-row catch-up's de-duplication took 143 s with it, 113 s
        # without (the state store's 2nd largest cost after its writes).
        "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
    }
    on_store = lakehouse is not None and object_store.is_object_store(lakehouse)
    if on_store:
        settings["spark.jars"] += "," + ",".join(s3_jars())
        settings.update(object_store.current().spark_confs())
    else:
        # Streaming checkpoints (offset, commit and state logs) through Hadoop's FileSystem API rather than
        # FileContext: without Hadoop's native library, FileContext's rename on a local disk forks `readlink` twice
        # (its symlink checks) on top of the `chmod` every created file forks. A micro-batch writes two such files,
        # so its walCommit + commitOffsets took ~125 ms on an idle machine, 320 ms with two busy cores (the alert
        # lane's batches), against ~30 ms this way. A local rename is atomic either way. FileContext refuses an
        # existing target in the rename itself; this way it is checked just before, a gap only two drivers writing
        # one checkpoint at once could race through.
        settings["spark.sql.streaming.checkpointFileManagerClass"] = (
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
    settings.update(conf or {})
    from pyspark import SparkConf, SparkContext

    if launched_by_spark_submit():
        # spark-submit already chose the master and the jars; its --conf settings win over ours.
        SparkContext._ensure_initialized()
        submitted = SparkConf()
        if "delta-spark" not in submitted.get("spark.jars", ""):
            raise RuntimeError("spark-submit needs the Delta jars: add --jars \"$(ls jvm/jars/*.jar | paste -sd,)\"")
        if on_store and "hadoop-aws" not in submitted.get("spark.jars", ""):
            raise RuntimeError(f"spark-submit needs the S3A connector for {lakehouse}: add its jars "
                               "(jvm/s3/jars/*.jar) to --jars, or run the job with `isrwatch submit`")
        settings = {k: v for k, v in settings.items() if k != "spark.jars" and not submitted.contains(k)}
        user_level = submitted.contains("spark.log.level")
    else:
        if master is not None:
            settings["spark.master"] = master
        elif "spark.master" not in settings and not os.environ.get("SPARK_MASTER"):
            settings["spark.master"] = "local[*]"
        if SparkContext._gateway is None:  # no driver JVM yet: this process starts it
            if "spark.driver.extraClassPath" not in settings:  # the caller's class path stays as it is
                settings = with_local_master_settings(settings, local_master_settings(
                    settings.get("spark.master") or os.environ.get("SPARK_MASTER", ""), on_store))
            env = local_driver_env(settings)
            if not verbose:
                settings = with_quiet_log4j(settings)
            _launch_jvm({**settings, "spark.app.name": app_name}, env, quiet=not verbose)
        user_level = "spark.log.level" in settings
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not verbose and not user_level and _spark_default_logging(spark):
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_active_session() -> None:
    """Stop the JVM before the interpreter exits (tearing it down at exit can crash it)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
