"""The forensics engine: why a job failed or hangs, and which rank is the cause.

Three entry points over one evidence model and one judge: ``live/`` (run-trainer's hang watchdog, beside the
running job), ``postmortem/`` (a finished job, from what it left) and ``attach/`` (a job running now, read from
outside). ``evidence/`` reads every source into typed records and imports nothing above it; ``judge/`` decides
on those records and imports no entry point. ARCHITECTURE.md draws the layers.
"""
