"""Apps the snapshot tests screenshot."""
