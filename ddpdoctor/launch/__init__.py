"""run-trainer: torchrun launch configuration, error files and the post-mortem."""
