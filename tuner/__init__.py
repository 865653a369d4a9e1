"""blocktune tuner."""
