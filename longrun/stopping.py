"""
Stopping cleanly: on a signal (Ctrl-C, a scheduler's SIGTERM, or SIGHUP from a dropped connection)
every rank finishes its step and all stop together; a loss that is not finite stops the run before
the update; and how a job of many processes exits. A module of its own: none of it trains.
"""

import math
import os
import signal
import sys
import traceback

import torch
import torch.distributed as dist

from longrun.common import UserError, run_cli


class StopRequest:
    """SIGTERM (a scheduler pre-empting us), SIGHUP (the terminal went away: a dropped SSH
    connection, which torchrun forwards to its workers) or Ctrl-C: the run finishes its step, writes
    a checkpoint and exits. A second Ctrl-C interrupts at once."""

    def __init__(self, device, ddp, announce):
        self.device, self.ddp, self.signalled = device, ddp, False
        # whether this process says that it heard a Ctrl-C (rank 0: one line, not one a rank)
        self.announce = announce
        self.stopping = False  # what the ranks agreed: once yes, it stays yes
        # stdout and stderr, where they are the terminal
        self.terminal = [fd for fd in (1, 2) if os.isatty(fd)]
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        # under nohup the run outlives the terminal
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            signal.signal(signal.SIGHUP, self._handle)

    def _handle(self, signum, frame):
        self.signalled = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # at once: a step can take seconds, and a second Ctrl-C is near
        if signum == signal.SIGINT and self.announce:
            # said after the line above, which a second Ctrl-C must find in place; straight to the
            # file descriptor, as a print here could land inside the loop's own print
            os.write(
                2,
                b"Ctrl-C: the run stops after this step, with a checkpoint; Ctrl-C again stops it "
                b"now\n",
            )
        # a terminal that hung up fails every write: the rest of the output goes nowhere
        if signum == signal.SIGHUP:
            nowhere = os.open(os.devnull, os.O_WRONLY)
            for fd in self.terminal:
                os.dup2(nowhere, fd)
            os.close(nowhere)

    def requested(self):
        """Whether any rank was signalled: then all stop at the same point. Every rank asks at the
        same points, in one small all-reduce; once the answer is yes, it stays yes without asking
        again."""
        if not self.stopping:
            signalled = torch.tensor(float(self.signalled), device=self.device)
            if self.ddp:
                dist.all_reduce(signalled)  # a sum: how many ranks were signalled
            self.stopping = signalled.item() > 0
        return self.stopping


def stop_if_not_finite(loss, norm, step, run):
    """Stop before the update if the loss or the gradient norm is not finite. The weights that gave
    it are this step's checkpoint, if one was saved: it is set aside, so that --resume continues
    from the one before."""
    if math.isfinite(loss) and math.isfinite(norm):
        return
    aside = run.set_aside(step)
    raise UserError(
        f"loss {loss}, gradient norm {float(norm)} at step {step}: stopped before the "
        f"update{aside}; --resume "
        "continues from the checkpoint before, if any (with a lower --max-lr, say)"
    )


def peer_gone(error):
    """Whether a collective failed because another rank of the job is gone (gloo's words for it;
    NCCL's ranks wait for torchrun to stop them instead)."""
    return isinstance(error, dist.DistNetworkError) or any(
        words in str(error) for words in ("Connection closed by peer", "Connection reset by peer")
    )


def leave_process_group(code):
    """Leave the process group on a clean exit; after an error, exit at once. Destroying the group
    waits for the other ranks' pending work (NCCL's can, since torch 2.6), and they wait for this
    rank at their next collective: the job would hang until the group's 10-minute timeout. Exiting
    lets torchrun see the failure and stop them."""
    if code == 0:
        dist.destroy_process_group()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # now: not even Python's own shutdown, which could wait on the group as well


def run_job(prog, run, interrupted, finish=lambda: None):
    """run_cli for one rank of a job, which then leaves the process group: an error only this rank
    hits is its one line (a bug's is its traceback); a rank whose collective broke because another
    rank is gone says just that."""
    try:
        code = run_cli(prog, run, interrupted=interrupted)
    except Exception as error:
        # another rank failed first, and said why: that's the one
        if dist.is_initialized() and peer_gone(error):
            print(
                f"{prog}: error: rank {dist.get_rank()}: another process of the job stopped",
                file=sys.stderr,
            )
        else:
            traceback.print_exc()  # a bug: its traceback, then out (at once, in a job: below)
        code = 1
    finally:
        finish()  # after the error's line (the run's console.txt holds it too)
    if dist.is_initialized():
        leave_process_group(code)
    return code
