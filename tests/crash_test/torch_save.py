"""Worked example for `shardlift crash-test`: torch.save to a temp name, then os.replace,
without any fsync (a pattern common in training scripts).

    python torch_save.py save STEP   # writes ./model.pt via ./model.pt.tmp
    python torch_save.py check       # torch.load; exit 0 iff it is step 1 or 2
    python torch_save.py check-acked # the same, and step 2 once the save has returned
"""
import os
import sys

import torch

SHAPE = (64, 64)


def acknowledged():
    """Whether the save had returned when the power was cut (`shardlift crash-test` sets
    SHARDLIFT_ACKED in each state: acknowledgements given before it)."""
    return int(os.environ.get("SHARDLIFT_ACKED", "0")) > 0


def main():
    mode = sys.argv[1]
    if mode == "save":
        step = int(sys.argv[2])
        torch.save({"weight": torch.full(SHAPE, float(step)), "step": step}, "model.pt.tmp")
        os.replace("model.pt.tmp", "model.pt")
        return 0
    if not os.path.exists("model.pt"):
        print("unloadable: no model.pt")
        return 1
    try:
        loaded = torch.load("model.pt", weights_only=True)
    except Exception as error:  # the loader's verdict, whatever the reason
        print(f"unloadable: {type(error).__name__}")
        return 1
    step = loaded.get("step") if isinstance(loaded, dict) else None
    if step in (1, 2) and torch.equal(loaded["weight"], torch.full(SHAPE, float(step))):
        if mode == "check-acked" and acknowledged() and step != 2:
            print(f"acknowledged save lost: loaded step {step}")
            return 1
        print(f"loaded step {step}")
        return 0
    print("loaded a state that is neither the old nor the new one")
    return 1


if __name__ == "__main__":
    sys.exit(main())
