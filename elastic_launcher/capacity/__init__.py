"""Free capacity over time (traces) and the operator's sizing decisions on it (sizing_policy): shared
by rehearsals and the simulator."""
