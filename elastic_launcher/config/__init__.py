"""The recipe composed by Hydra (compose) and the launcher's own settings (settings)."""
