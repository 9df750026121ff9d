"""The live watchdog beside a running job: when silence becomes a hang (hang.py, stall.py), the collectives'
progress and stragglers, and the exchange of evidence between the nodes of one run."""
