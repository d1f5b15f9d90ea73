"""The few helpers the scripts share."""

import argparse
import contextlib
import errno
import hashlib
import os
import re
import shutil
import signal
import sys
import threading

# <|endoftext|>: GPT-2's only special token, the last id; fineweb.py puts it before every document
EOT = 50256


class UserError(Exception):
    """A mistake the user can fix (bad input, a missing file, a folder we must not touch): reported
    as one line."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with a bad flag reported like every other user mistake: one line on stderr, exit
    code 1."""

    def error(self, message):
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(1)


# torch's CPU allocator says so; CUDA's raises torch.OutOfMemoryError
ALLOCATOR = "can't allocate memory"
TIKTOKEN_HOST = "openaipublic.blob.core.windows.net"  # where tiktoken fetches GPT-2's files


def memory_asked(error):
    """How much an allocation that failed asked for, as the allocator said it, or what failed."""
    if found := re.search(r"allocate (\d+) bytes", str(error)):  # the CPU allocator counts bytes
        return f"{int(found[1]) / 2**30:,.1f} GiB asked for at once"
    return (str(error).splitlines() or [type(error).__name__])[0]


def run_cli(prog, run, too_big="a smaller model, -B or -T", interrupted=None):
    """run() -> exit code. A user's mistake, or the disk refusing a write, is one line on stderr and
    exit code 1; running out of memory names what to make smaller (too_big); a Ctrl-C, what it
    leaves behind (interrupted, status 130; without it, KeyboardInterrupt goes on to the caller);
    anything else is a bug and keeps its traceback."""
    try:
        return run() or 0
    except UserError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
    except OSError as e:  # a full disk, a read-only folder, a file that vanished, no network
        where, why = f"{e.filename}: " if e.filename else "", e.strerror or e
        if TIKTOKEN_HOST in str(e):  # tiktoken could not fetch GPT-2's BPE files
            why = f"cannot download GPT-2's tokenizer ({TIKTOKEN_HOST}): offline, "
            why += "set TIKTOKEN_CACHE_DIR"
        print(f"{prog}: error: {where}{why}", file=sys.stderr)
    except (MemoryError, RuntimeError) as e:
        # an allocator's refusal: the flags ask for more than the machine has
        # torch.compile's toolchain
        if any(name in str(e) for name in ("InvalidCxxCompiler", "CppCompileError")):
            first = str(e).splitlines()[0]
            fix = "install a C++ compiler and Python's headers, or pass --no-compile"
            print(
                f"{prog}: error: torch.compile could not build its code ({first}): {fix}",
                file=sys.stderr,
            )
            return 1
        if not (
            isinstance(e, MemoryError)
            or type(e).__name__ == "OutOfMemoryError"
            or ALLOCATOR in str(e)
        ):
            raise
        print(f"{prog}: error: out of memory: {memory_asked(e)} (try {too_big})", file=sys.stderr)
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        print(f"{prog}: interrupted: {interrupted}", file=sys.stderr)
        return 130
    return 1


def count(text):
    """An argparse type: a whole number >= 1, written as 100000000, 100_000_000 or 1e8."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= sys.maxsize or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(value)


def write_atomically(path, write):
    """write(f) into a temporary file beside path, then rename it over path: a crash, a full disk or
    Ctrl-C leaves the old file or the new one, never half of one. A failed write removes its
    temporary file; a killed one's is removed by the next write of the same path."""
    remove_stale_temporaries(os.path.dirname(path) or ".", os.path.basename(path))
    # the process's own: two writers of one path never share a temporary file
    tmp = f"{path}.{os.getpid()}.tmp"
    # Ctrl-C and SIGTERM wait until the file is whole: an interrupt inside a writer (torch.save's
    # zip writer, say) can surface as that writer's own error instead of KeyboardInterrupt; they
    # arrive the moment the file is done
    with stop_signals_held():
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename makes it count
            os.replace(tmp, path)
        except Exception as e:
            if (reported := disk_error(e, tmp)) is None or reported is e:
                raise
            raise reported from None
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def disk_error(error, path):
    """The OSError to report for a write to path that raised error, or None where the disk is not to
    blame (a bug keeps its traceback). Writers report a full disk in their own words (torch.save's
    zip writer raises a RuntimeError, numpy says "N requested and M written" with no errno): where
    the disk has under 1 MiB left, they are No space left on device. A library written in Rust
    (safetensors) ends its message with the system's "(os error N)". A failed write that names no
    file names path."""
    if getattr(error, "errno", None) is None:
        if m := re.search(r"\(os error (\d+)\)$", str(error)):
            return OSError(int(m[1]), os.strerror(int(m[1])), path)
        if out_of_space(path):
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
    if isinstance(error, OSError):
        return error if error.filename else OSError(error.errno, error.strerror or str(error), path)
    return None


def out_of_space(path):
    """Whether the file system holding path has less than 1 MiB left for us."""
    return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < 2**20


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals_held():
    """Ctrl-C, SIGTERM and SIGHUP that arrive inside the block take effect as it ends, with the
    handlers of the time. Python runs its handlers in the main thread whichever thread the kernel
    picked, so blocking the signals in the main thread alone is not enough: there, they are caught
    and replayed instead. Another thread (fineweb.py's shard writer) cannot set handlers; it blocks
    them, and the kernel hands them to a thread that will pass them on."""
    if threading.current_thread() is not threading.main_thread():
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return
    caught = []
    # an ignored signal (SIGHUP under nohup) stays ignored; None: a handler set outside Python, left
    # alone
    handlers = {
        s: h for s in STOP_SIGNALS if (h := signal.getsignal(s)) not in (signal.SIG_IGN, None)
    }
    for s in handlers:
        signal.signal(s, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):  # each once, in the order they came
            signal.raise_signal(s)


def process_running(pid):
    """Whether a process with this id exists (ours or another user's)."""
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's process
        pass
    return True


def remove_stale_temporaries(folder, name=None):
    """Delete what killed writers left in folder: NAME.PID.tmp files (of any name, without one)
    whose PID no longer runs; a live writer's stay. The folder is listed, so its name is never read
    as a pattern."""
    for entry in os.listdir(folder):
        found = re.fullmatch(r"(.+)\.(\d+)\.tmp", entry)
        if found and name in (None, found[1]) and not process_running(int(found[2])):
            os.remove(os.path.join(folder, entry))


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def lock_folder(folder, hold=True):
    """Hold an exclusive lock on folder/.lock for as long as the returned file stays open (the
    process's life): a second process that tries is refused with the first one's pid. The OS drops
    the lock when its holder dies. hold=False only looks: refused the same way while another process
    holds it, nothing created or written."""
    import fcntl  # here: POSIX only, and only the writers need it

    path = os.path.join(folder, ".lock")
    if not (hold or os.path.exists(path)):
        return None
    f = open_no_link(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise UserError(
            f"{folder} is in use by another process (pid {holder}): wait for it, or choose another "
            "folder"
        ) from None
    if not hold:
        f.close()
        return None
    f.truncate(0)
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def batch_advice(total_batch, B, T, world_size, max_steps, resuming):
    """Why total_batch tokens a step are no whole number of B*T micro-batches on world_size
    processes, and what would be: a -B that keeps the run, and for a fresh run a --total-batch with
    the --max-steps that keeps its tokens (a resumed run keeps the total batch it trained with)."""
    tokens = B * T * world_size  # one micro-step of all processes
    fits = [b for b in range(B - 1, 0, -1) if total_batch % (b * T * world_size) == 0]
    hints = [f"-B {b} (the same run)" for b in fits[:1]]
    if not resuming:
        other = max(1, round(total_batch / tokens)) * tokens
        # another total batch is another experiment (other steps, another schedule): this
        # --max-steps keeps its tokens
        keep = round(total_batch * max_steps / other)
        hints.append(f"--total-batch {other} --max-steps {keep} (the same tokens in other steps)")
    advice = "use a number of processes that divides it"
    if hints:
        advice = f"pass {', or '.join(hints)}"
    kept = "; a resumed run keeps its --total-batch" if resuming else ""
    return (
        f"--total-batch {total_batch} is not a multiple of B*T*processes = {B}*{T}*{world_size} = "
        f"{tokens}: {advice}{kept}"
    )


def loading_error(error, name):
    """The one-line UserError for a model that did not load, or the error itself where it is a bug
    (ours or a library's): load_model raises what this returns."""
    if isinstance(error, ImportError):
        return UserError(f"{name} is loaded by transformers: pip install -e '.[hf]'")
    # no such model or folder, no network, a broken config, weights cut short or of other sizes
    expected = (OSError, ValueError, KeyError, RuntimeError)
    if not isinstance(error, expected) and type(error).__name__ != "SafetensorError":
        return error
    reason = (str(error).splitlines() or [type(error).__name__])[0]
    return UserError(f"cannot load model {name!r}: {reason}")


def open_no_link(path, mode):
    """open(path, mode) ("a" or "a+") for a file we append to, refusing a symbolic link in its
    place: we never write through one (in a shared folder, it could reach another person's file)."""
    flags = os.O_CREAT | os.O_APPEND | (os.O_RDWR if mode == "a+" else os.O_WRONLY)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise UserError(
            f"{path} is a symbolic link: remove it (nothing is written through a link)"
        ) from None
    return open(fd, mode, encoding="utf-8")
