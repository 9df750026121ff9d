"""Joining nodes: endpoint probe, TCPStore rendezvous, probe server, verdict broadcast."""
