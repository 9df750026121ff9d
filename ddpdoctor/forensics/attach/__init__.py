"""`ddpdoctor attach`: a running torch.distributed job, whoever launched it, read from outside (discover.py finds
its ranks, sample.py reads their stacks in rounds, judge.py decides, run.py makes the document)."""
