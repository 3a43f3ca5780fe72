"""Reading the lakehouse without a JVM, for the API and the dashboards: delta-rs tables with a refresh
interval, the latest state of a cluster as the bronze tables tell it, and rows as JSON-ready values."""
