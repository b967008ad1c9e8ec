"""Training the tiny transformer: data, loop, checkpoints, CLI."""
