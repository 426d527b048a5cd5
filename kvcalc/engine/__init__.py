"""The pure sizing engine: spec types and the formulas over them. No printing, no file access."""
