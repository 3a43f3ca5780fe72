"""Real servers on loopback for the tests, the benches and the demos, not part of the product: a Kafka KRaft
cluster (testing/kafka/), an S3-compatible store (testing/s3proxy.py) and a Spark standalone cluster
(testing/spark_standalone.py). Each starts its own processes and stops them, even when the caller fails."""
