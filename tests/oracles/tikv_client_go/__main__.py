"""``python -m tests.oracles.tikv_client_go``: build the oracle (or find it cached) and print its path."""

from tests.oracles.tikv_client_go.build import build_oracle

print(build_oracle())
