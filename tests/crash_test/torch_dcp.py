"""Worked example for `shardlift crash-test`: torch.distributed.checkpoint on one process.

    python torch_dcp.py save STEP   # writes a small state dict to ./ckpt with dcp.save
    python torch_dcp.py check       # loads ./ckpt with dcp.load; exit 0 iff it is step 1 or 2
    python torch_dcp.py check-acked # the same, and step 2 once the save has returned

The check prints one path-free line: what it loaded, or why it could not.
"""
import os
import sys
import warnings

import torch
import torch.distributed.checkpoint as dcp

warnings.filterwarnings("ignore")
SHAPE = (64, 64)


def state(step):
    return {"weight": torch.full(SHAPE, float(step)), "step": torch.tensor(step)}


def acknowledged():
    """Whether the save had returned when the power was cut (`shardlift crash-test` sets
    SHARDLIFT_ACKED in each state: acknowledgements given before it)."""
    return int(os.environ.get("SHARDLIFT_ACKED", "0")) > 0


def main():
    mode = sys.argv[1]
    if mode == "save":
        dcp.save(state(int(sys.argv[2])), checkpoint_id="ckpt")
        return 0
    template = {"weight": torch.zeros(SHAPE), "step": torch.tensor(0)}
    try:
        dcp.load(template, checkpoint_id="ckpt")
    # CheckpointException derives from BaseException, not Exception.
    except BaseException as error:  # the loader's verdict, whatever the reason
        inner = getattr(error, "failures", {}).get(0, error)
        if isinstance(inner, tuple):  # (exception, its traceback frames)
            inner = inner[0]
        reason = str(inner).splitlines()[-1][:300] if str(inner) else ""
        print(f"unloadable: {type(inner).__name__}: {reason}")
        return 1
    step = int(template["step"])
    if step in (1, 2) and torch.equal(template["weight"], torch.full(SHAPE, float(step))):
        if mode == "check-acked" and acknowledged() and step != 2:
            print(f"acknowledged save lost: loaded step {step}")
            return 1
        print(f"loaded step {step}")
        return 0
    print("loaded a state that is neither the old nor the new one")
    return 1


if __name__ == "__main__":
    sys.exit(main())
