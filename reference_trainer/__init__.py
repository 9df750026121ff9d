"""The reference DDP trainer (installed as ddpdoctor_trainer)."""
