"""Fabric preflight, run in every pod of an indexed Job (one pod per node of a TP group) before workers load weights.

Checks, in order, and exits non-zero naming the node on the first failure (the message also goes to the pod's
termination message, which `kubectl describe` and `pulumi up`'s Job await show):
1. no host `nvidia-imex` service (a systemd IMEX daemon on the host conflicts with the DRA driver's per-
   ComputeDomain daemon): read from the host's systemd service cgroups (HOST_SERVICES, a read-only hostPath of
   /sys/fs/cgroup/system.slice), where a running nvidia-imex.service has a cgroup holding its processes; no hostPID;
2. the ComputeDomain's IMEX channel is in the container (/dev/nvidia-caps-imex-channels/channel*): the channel
   claim was allocated, so IMEX is ready on this node;
3. an NCCL all-reduce across every GPU of the group (torch.distributed, one process per GPU), whose bus
   bandwidth must reach MIN_BUS_BANDWIDTH_GBPS: a group split across NVLink cliques or with a broken link falls
   far below NVLink rates.
Environment: NODE_NAME, JOB_COMPLETION_INDEX, NNODES, GPUS_PER_NODE, MASTER_ADDR, MASTER_PORT,
MIN_BUS_BANDWIDTH_GBPS, COMPUTE_DOMAIN, HOST_SERVICES. Standard library only, except torch (from the serving image) for step 3.
"""
from __future__ import annotations

import glob
import os
import sys
import time

TERMINATION_LOG = "/dev/termination-log"
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels/channel*"
MESSAGE_BYTES = 1 << 30  # 1 GiB per all-reduce, as nccl-tests' large-message end


def fail(message: str) -> None:
    print(f"PREFLIGHT FAILED: {message}", file=sys.stderr, flush=True)
    try:
        with open(TERMINATION_LOG, "w") as f:
            f.write(message)
    except OSError:
        pass
    sys.exit(1)


IMEX_UNIT = "nvidia-imex.service"


def host_imex_pids(services: str) -> list[int]:
    """PIDs of a host nvidia-imex.service, from the host's system.slice cgroup directory (cgroup v2): systemd gives
    every running service its own cgroup there (systemd.special(7)) and removes it when the service stops; pods run
    under kubepods.slice, so a ComputeDomain daemon's nvidia-imex never appears. Raises OSError when `services` is not
    a systemd system.slice (nothing could be checked: a pass would be a guess)."""
    if not os.path.isfile(os.path.join(services, "cgroup.procs")):
        raise OSError(f"{services} is not the host's systemd system.slice cgroup (no cgroup.procs; a cgroup v1 host?)")
    try:
        with open(os.path.join(services, IMEX_UNIT, "cgroup.procs")) as f:
            return [int(line) for line in f.read().split()]
    except FileNotFoundError:
        return []


def bus_bandwidth_gbps(seconds_per_op: float, nbytes: int, world: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: algorithm bandwidth x 2(n-1)/n."""
    return nbytes / seconds_per_op * 2 * (world - 1) / world / 1e9


def _rank(local: int, node_rank: int, gpus: int, world: int, master: str, port: str, out) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(local)
    dist.init_process_group("nccl", init_method=f"tcp://{master}:{port}", rank=node_rank * gpus + local,
                            world_size=world)
    x = torch.ones(MESSAGE_BYTES // 2, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    iters = 20
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    busbw = torch.tensor([bus_bandwidth_gbps((time.perf_counter() - start) / iters, MESSAGE_BYTES, world)],
                         device="cuda")
    dist.all_reduce(busbw, op=dist.ReduceOp.MIN)
    if local == 0:
        out.put(float(busbw.item()))
    dist.destroy_process_group()


def all_reduce_gbps(node_rank: int, nnodes: int, gpus: int, master: str, port: str) -> float:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(i, node_rank, gpus, nnodes * gpus, master, port, out)) for i in range(gpus)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"an NCCL rank exited with {[p.exitcode for p in procs]}")
    return out.get(timeout=10)


def main() -> None:
    env = os.environ
    node = env.get("NODE_NAME", "?")
    domain = env.get("COMPUTE_DOMAIN", "?")
    try:
        pids = host_imex_pids(env.get("HOST_SERVICES", "/host/system.slice"))
    except OSError as exc:
        fail(f"node {node}: cannot tell whether the host runs nvidia-imex: {exc}")
    if pids:
        fail(f"node {node}: the host runs nvidia-imex (pids {pids}) outside Kubernetes; stop and disable the "
             "nvidia-imex service, the DRA driver runs IMEX per ComputeDomain")
    if not glob.glob(IMEX_CHANNELS):
        fail(f"node {node}: no IMEX channel in the container: ComputeDomain {domain} is not ready on this node")
    nnodes, gpus = int(env["NNODES"]), int(env["GPUS_PER_NODE"])
    try:
        gbps = all_reduce_gbps(int(env["JOB_COMPLETION_INDEX"]), nnodes, gpus, env["MASTER_ADDR"], env["MASTER_PORT"])
    except Exception as exc:  # noqa: BLE001 - any NCCL failure is a fabric failure on this node's group
        fail(f"node {node}: NCCL all-reduce over {nnodes} nodes x {gpus} GPUs failed: {exc}")
    minimum = float(env["MIN_BUS_BANDWIDTH_GBPS"])
    print(f"node {node}: all-reduce bus bandwidth {gbps:.0f} GB/s over {nnodes * gpus} GPUs (minimum {minimum:g})")
    if gbps < minimum:
        fail(f"node {node}: all-reduce bus bandwidth {gbps:.0f} GB/s < {minimum:g} GB/s across {nnodes} nodes: "
             "the group is not on one NVLink fabric (clique), or a link is degraded")


if __name__ == "__main__":
    main()
