"""torch.distributed.checkpoint's save failing on rank 1 (its planner raises): DCP gathers the exception and raises
`CheckpointException ranks:dict_keys([1])` on every rank, so rank 0 exits first with rank 1's error (issue 45
item 4). argv[1]: the checkpoint folder."""
import datetime, sys
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

class Planner(DefaultSavePlanner):
    def create_local_plan(self):
        if dist.get_rank() == 1:
            raise RuntimeError("corrupt batch at step 6 on rank 1")
        return super().create_local_plan()

dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=30))
model = torch.nn.Linear(8, 8)
dcp.save({"model": model.state_dict()}, checkpoint_id=sys.argv[1], planner=Planner())
