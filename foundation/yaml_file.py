"""Read one of the YAML files in conf/: a missing file or bad YAML is an error naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_yaml(path: Path, error: type[ValueError]) -> Any:
    """The parsed document; raises `error` with the file named when it is missing or not valid YAML."""
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {e}") from None
