"""Stand-ins for services that cannot run on the build machines (see README, Limits)."""
