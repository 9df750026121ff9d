"""Rendering: the terminal (rich) and the self-contained HTML report (Jinja2)."""
