"""run-trainer's launching: a DDP job through torchrun with diagnosable hygiene (the typed config, the bootstrap every
rank gets, per-rank logs, run.json); explaining its failures is ddpdoctor/forensics/'s."""
