"""Built-in ddpdoctor checks, one module per subsystem (installed as ddpdoctor_checks)."""
