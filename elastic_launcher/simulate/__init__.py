"""A job on a capacity trace in virtual time, elastic against static (simulator)."""
