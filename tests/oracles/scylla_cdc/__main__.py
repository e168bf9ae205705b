"""``python -m tests.oracles.scylla_cdc``: build the oracle (or find it cached) and print its path."""

from tests.oracles.scylla_cdc.build import build_oracle

print(build_oracle())
