"""The scylla-cdc oracle: ScyllaDB's Rust CDC library (crates.io ``scylla-cdc`` 0.7.0) reading a
log table the stand-in writer filled, each row it delivers as a JSON line (``src/main.rs``), built
and cached by :mod:`.build`; :func:`read_log` runs it."""

from tests.oracles.scylla_cdc.build import OracleBuildError, OracleUnavailableError, build_oracle
from tests.oracles.scylla_cdc.run import OracleRunError, read_log

__all__ = ["OracleBuildError", "OracleRunError", "OracleUnavailableError", "build_oracle", "read_log"]
