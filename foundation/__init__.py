"""The shared foundation every layer stands on: settings, the Spark session, Delta I/O (delta-rs writes,
checksums, idempotent appends, upkeep) and the wall-clock pacer. It imports only `schemas`."""
