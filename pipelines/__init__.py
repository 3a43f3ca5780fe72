"""Pure DataFrame -> DataFrame transformations; no sources, sinks, paths or config files here."""
