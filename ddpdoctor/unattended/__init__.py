"""Running ddpdoctor with nobody watching: the SLURM node check (Prolog=, Epilog=, HealthCheckProgram=) and its site
config. Exit codes for other monitors and Prometheus series are renderings of any document (report/monitors.py,
report/prometheus.py); a node's history is ddpdoctor/history/."""
