"""run-trainer: launching a DDP job through torchrun with diagnosable hygiene, and explaining its failures."""
