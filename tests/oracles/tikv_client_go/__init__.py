"""The tikv/client-go oracle: TiKV's Go client (Go module ``github.com/tikv/client-go/v2`` v2.0.4)
driving a cluster through its ``rawkv`` API from ``main.go``, built and cached by :mod:`.build`;
:class:`ClientGo` runs it and exchanges operations with it."""

from tests.oracles.tikv_client_go.build import OracleBuildError, OracleUnavailableError, build_oracle
from tests.oracles.tikv_client_go.run import ClientGo, OracleRunError

__all__ = ["ClientGo", "OracleBuildError", "OracleRunError", "OracleUnavailableError", "build_oracle"]
