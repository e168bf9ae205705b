"""cdcflow's source plugins: one package per source type."""
