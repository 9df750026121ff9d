"""ddpdoctor: preflight, benchmark, launch and post-mortem for multi-node PyTorch DDP."""
__version__ = "0.1.0"
