"""The real-cluster bronze writer: `isrwatch collect` reads a Kafka cluster (Admin API, the brokers' metrics,
an end-to-end canary) into the same bronze tables as the emulator."""
