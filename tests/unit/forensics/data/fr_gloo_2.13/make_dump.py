"""Writes this folder's rank<R>.json: real flight records of torch's own writer (gloo, CPU), as run-trainer's
bootstrap takes them at exit: ``torch._C._distributed_c10d._dump_fr_trace_json(True, False)``.
`TORCH_FR_BUFFER_SIZE=100 torchrun --nproc-per-node 2 make_dump.py OUT_DIR` (recorded with torch 2.13.0+cpu).
A job of an all_reduce, a send/recv, a batch_isend_irecv, an all_to_all_single and a broadcast: gloo on 2.13
records the collectives only (no send/recv), with their input/output sizes."""
import json
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
r = dist.get_rank()
dist.all_reduce(torch.ones(4))
if r == 0:
    dist.send(torch.ones(3), 1)
else:
    dist.recv(torch.ones(3), 0)
ops = [dist.P2POp(dist.isend, torch.ones(2), 1 - r), dist.P2POp(dist.irecv, torch.zeros(2), 1 - r)]
for w in dist.batch_isend_irecv(ops):
    w.wait()
dist.all_to_all_single(torch.zeros(4), torch.ones(4), [2, 2], [2, 2])
dist.broadcast(torch.ones(5), 0)
dist.barrier()
record = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, False))
with open(f"{sys.argv[1]}/rank{r}.json", "w") as fh:
    json.dump(record, fh, indent=1)
dist.destroy_process_group()
