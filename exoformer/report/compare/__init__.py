"""`compare`: a few runs or variants side by side, with their curves."""
