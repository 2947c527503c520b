"""Adapters that plug scangen's scans into RL libraries (one module per library; each needs its extra)."""
