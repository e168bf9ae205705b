"""cdcflow's sink plugins: one package per sink type."""
