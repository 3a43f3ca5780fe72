"""The `isrwatch` command line: emulate, pipeline, serve, sql, webhook-receiver. Nothing imports it."""
