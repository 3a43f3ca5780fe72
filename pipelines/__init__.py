"""What the jobs compute, apart from how Spark runs it: expectations and invariants for validation, the
alert engine and its rules, SLO math, posture findings, and alert delivery (webhooks in Alertmanager's
format, silences). Imports `foundation` and `schemas`; the jobs and the API import it."""
