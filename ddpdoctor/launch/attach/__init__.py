"""`ddpdoctor attach`: a running torch.distributed job, whoever launched it, read from outside (discover.py finds
its ranks, sample.py reads their stacks twice, judge.py decides, run.py makes the document)."""
