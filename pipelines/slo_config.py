"""Load conf/slos.yaml (or another file): YAML errors and spec errors name the file, SLO and field."""

from __future__ import annotations

from pathlib import Path

from foundation.yaml_file import read_yaml
from pipelines.slo_spec import Slo, SloConfigError, parse_slos

DEFAULT_SLOS = Path(__file__).resolve().parent.parent / "conf" / "slos.yaml"


def load_slos(path: str | Path | None = None) -> tuple[Slo, ...]:
    source = Path(path) if path is not None else DEFAULT_SLOS
    return parse_slos(read_yaml(source, SloConfigError), str(source))
