"""What the Django apps and the Spark jobs import from the broker side: the agents' client and
models, choices, signing and secrets, the API's error, and the rules both sides share (KIP-950's
state machine, Kafka 3.9's config mapping, hashing, KIP-253 ordering, placement, probes, remote
retention, the object store's layout). Imports nothing else of broker_agent. Kept free of
imports here: the Spark job zip ships only some of these modules (``spark_tasks/submit.py``).
"""
