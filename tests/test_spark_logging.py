"""Quiet by default: how a driver JVM isrwatch starts gets its logging, and where the user's own settings win.

The end-to-end check (a job's output holds only its own lines, and Spark's with --verbose) is in
tests/pipeline/test_exactly_once.py, on runs it makes anyway.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from foundation.spark import (
    LOG4J2_CONFIG,
    _forward_stderr,
    local_driver_env,
    quiet_python_loggers,
    user_log4j_config,
    with_quiet_log4j,
)

OURS = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """An environment without any logging configuration, its SPARK_CONF_DIR an empty folder."""
    return {"SPARK_CONF_DIR": str(tmp_path)}


def test_the_driver_gets_our_log4j_configuration_first_so_the_users_options_come_later(
        environ: dict[str, str]) -> None:
    assert with_quiet_log4j({}, environ)["spark.driver.defaultJavaOptions"] == OURS
    settings = with_quiet_log4j({"spark.driver.defaultJavaOptions": "-Xss4m",
                                 "spark.driver.extraJavaOptions": "-Dfoo=1"}, environ)
    assert settings["spark.driver.defaultJavaOptions"] == f"{OURS} -Xss4m"
    assert settings["spark.driver.extraJavaOptions"] == "-Dfoo=1"


@pytest.mark.parametrize(("settings", "env", "file"), [
    ({"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=/etc/mine.xml"}, {}, None),
    ({"spark.driver.defaultJavaOptions": "-Dlog4j.configurationFile=mine.properties"}, {}, None),
    ({}, {"PYSPARK_SUBMIT_ARGS": "--driver-java-options -Dlog4j2.configurationFile=x pyspark-shell"}, None),
    ({}, {"SPARK_SUBMIT_OPTS": "-Dlog4j.configuration=file:old.properties"}, None),
    ({}, {"LOG4J_CONFIGURATION_FILE": "/etc/mine.xml"}, None),
    ({}, {}, "log4j2.properties"),
    ({}, {}, "log4j2.xml"),
])
def test_a_log4j_configuration_of_the_users_wins(environ: dict[str, str], tmp_path: Path, settings: dict[str, str],
                                                   env: dict[str, str], file: str | None) -> None:
    if file:
        (tmp_path / file).write_text("")
    environ = {**environ, **env}
    assert user_log4j_config(settings, environ) is not None
    assert with_quiet_log4j(settings, environ) == settings


def test_a_template_in_the_conf_dir_is_not_a_configuration(environ: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "log4j2.properties.template").write_text("")
    assert user_log4j_config({}, environ) is None


@pytest.mark.parametrize(("settings", "env", "expected"), [
    ({"spark.master": "local[*]"}, {}, {"SPARK_LOCAL_IP": "127.0.0.1"}),
    ({"spark.master": "local[2]"}, {"SPARK_LOCAL_IP": "10.0.0.5"}, {}),
    ({"spark.master": "local[2]"}, {"SPARK_LOCAL_HOSTNAME": "box"}, {}),
    ({"spark.master": "local[2]", "spark.driver.host": "box"}, {}, {}),
    ({"spark.master": "local[2]", "spark.driver.bindAddress": "0.0.0.0"}, {}, {}),
    ({"spark.master": "spark://head:7077"}, {}, {}),    # executors elsewhere must reach the driver
])
def test_a_local_driver_binds_to_loopback_unless_the_user_chose_an_address(
        settings: dict[str, str], env: dict[str, str], expected: dict[str, str]) -> None:
    assert local_driver_env(settings, env) == expected


def test_the_jvm_stderr_reaches_ours_but_for_the_jdks_incubator_warning(capfd: Any) -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                       b"26/11/25 04:36:09 ERROR Executor: Exception in task 0.0\n"
                       b"\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"
                       b"a last line without a newline")
    os.close(write_fd)
    _forward_stderr(read_fd)  # returns at the end of the pipe
    assert capfd.readouterr().err == ("26/11/25 04:36:09 ERROR Executor: Exception in task 0.0\n"
                                      "\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"
                                      "a last line without a newline")


def test_the_forwarder_drains_the_jvm_even_when_our_stderr_is_gone() -> None:
    """A JVM writing to a pipe nobody reads would block once the pipe is full."""
    read_fd, write_fd = os.pipe()
    sink_read, sink_write = os.pipe()
    os.close(sink_read)                            # our stderr: a pipe whose reader went away

    written: list[int] = []

    def jvm() -> None:
        with os.fdopen(write_fd, "wb") as out:
            for i in range(20_000):                # ~1 MB: far more than a pipe holds
                out.write(f"26/11/25 04:36:09 ERROR Executor: line {i:06d} of the driver's output\n".encode())
        written.append(i + 1)

    writer = threading.Thread(target=jvm, daemon=True)
    saved = os.dup(2)
    os.dup2(sink_write, 2)
    try:
        writer.start()
        _forward_stderr(read_fd)                   # returns at the end of the pipe: everything was read
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(sink_write)
    writer.join(10)
    assert written == [20_000]


def test_the_shipped_configuration_keeps_the_pyspark_shell_level_at_the_roots() -> None:
    props = dict(line.split(" = ", 1) for line in LOG4J2_CONFIG.read_text().splitlines()
                 if line.strip() and not line.startswith("#"))
    assert props["rootLogger.level"] == "error"
    # Else Spark prints 'Setting default log level to "WARN"' and lets WARN lines through again.
    assert props["logger.pyspark.name"] == "org.apache.spark.api.python.PythonGatewayServer"
    assert props["logger.pyspark.level"] == props["rootLogger.level"]
    assert props["appender.console.target"] == "SYSTEM_ERR"


def test_python_library_loggers_show_errors_only_unless_verbose() -> None:
    try:
        quiet_python_loggers(verbose=False)
        assert logging.getLogger("py4j.clientserver").getEffectiveLevel() == logging.ERROR
        assert logging.getLogger("great_expectations").getEffectiveLevel() == logging.ERROR
        quiet_python_loggers(verbose=True)
        assert logging.getLogger("py4j.clientserver").getEffectiveLevel() <= logging.WARNING
    finally:
        quiet_python_loggers(verbose=False)  # as the test session's Spark left them
