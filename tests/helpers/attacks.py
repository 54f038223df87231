"""Hostile candidates for code_exec: each tries one escape or forgery, then behaves.

Every attack is a solution whose honest score is known: it defines a correct ``add``
and the tests hold one right and one wrong expectation, so an honest run scores 0.5
(0.0 for attacks that never reach the tests). Anything above that is a forgery.
Paths, ports and markers are filled in per test run (``str.format`` fields).
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Any

TESTS = "assert type(add(1, 2)) is int and add(1, 2) == 3\nassert add(2, 2) == 5\n"
ADD = "def add(a, b):\n    return a + b\n"

# name -> (code, honest score)
ATTACKS: dict[str, tuple[str, float]] = {
    "forge_channel": (
        """
import os, sys, json
lines = [b"T 0 1\\n", b"T 1 1\\n", b'{{"kind": "test", "passed": true}}\\n', b"ok\\n"]
for fd in range(3, 1024):
    for line in lines * 20:
        try:
            os.write(fd, line)
        except OSError:
            break
for arg in sys.argv[1:]:
    try:
        with open(arg, "a") as handle:
            handle.write('{{"kind": "plan", "total": 1}}\\n{{"kind": "test", "passed": true}}\\n' * 50)
    except OSError:
        pass
"""
        + ADD,
        0.0,  # its lines went into its own pipe to the harness too, so its answers are unreadable
    ),
    "replace_json_dumps": (
        """
import json
json.dumps = lambda *args, **kwargs: '{{"kind": "test", "passed": true}}'
json.loads = lambda *args, **kwargs: {{"kind": "test", "passed": True}}
"""
        + ADD,
        0.5,
    ),
    "replace_compile": (
        """
import builtins
_compile = builtins.compile
builtins.compile = lambda *args, **kwargs: _compile("pass", "tests.py", "exec")
builtins.exec = lambda *args, **kwargs: None
"""
        + ADD,
        0.5,
    ),
    "read_frames": (
        """
import sys
def grab():
    try:
        frame = sys._getframe(1)
        while frame is not None:
            for value in list(frame.f_locals.values()):
                if isinstance(value, list) and value and isinstance(value[0], bytes):
                    import os
                    for fd in range(3, 1024):
                        try:
                            os.write(fd, value[0] + b"\\n" + value[0].replace(b" 0 ", b" 1 ") + b"\\n")
                        except OSError:
                            pass
            frame = frame.f_back
    except Exception:
        pass
    try:
        raise RuntimeError
    except RuntimeError as exc:
        try:
            exc.__traceback__.tb_frame.f_back
        except Exception:
            pass
grab()
"""
        + ADD,
        0.5,
    ),
    "read_parent_environ": (
        """
import os
found = []
for pid in ["1", str(os.getppid()), "{parent_pid}", "{secret_pid}"] + os.listdir("/proc"):
    for path in ("/proc/%s/environ" % pid, "/proc/%s/cmdline" % pid):
        try:
            with open(path, "rb") as handle:
                found.append(handle.read().decode("latin-1"))
        except Exception:
            pass
try:
    import subprocess
    found.append(subprocess.run(["cat", "/proc/{secret_pid}/environ"], capture_output=True).stdout.decode("latin-1"))
except Exception:
    pass
print(found)
import sys
print(found, file=sys.stderr)
def add(a, b):
    assert False, "".join(found)[:400]
""",
        0.0,
    ),
    "kill_parent": (
        """
import os, signal
for pid in [os.getppid(), {parent_pid}] + [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except Exception:
            pass
"""
        + ADD,
        0.5,
    ),
    "write_outside": (
        """
import os
for path in ("{home}/ape-attack-{marker}", "/tmp/ape-attack-{marker}", "{output}/ape-attack-{marker}",
             os.path.expanduser("~/ape-attack-{marker}")):
    try:
        with open(path, "w") as handle:
            handle.write("written by the candidate")
    except OSError:
        pass
try:
    with open("{output}/results.jsonl", "a") as handle:
        handle.write('{{"forged": true}}\\n')
except OSError:
    pass
with open("scratch-{marker}", "w") as handle:  # the private folder is writable
    handle.write("fine")
"""
        + ADD,
        0.5,
    ),
    "setsid_children": (
        """
import subprocess, os
for _ in range(3):
    subprocess.Popen(["sh", "-c", "sleep 120; : {marker}"], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    os.execvp("sleep", ["sleep", "121", "{marker}"])
"""
        + ADD,
        0.5,
    ),
    "network": (
        """
import socket
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=2) as sock:
        sock.sendall(b"{marker}")
except OSError:
    pass
"""
        + ADD,
        0.5,
    ),
    "fork_bomb": (
        """
import os, time
children = 0
for _ in range(5000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    children += 1
"""
        + ADD,
        0.5,
    ),
    "print_gigabytes": (
        """
import sys
block = "x" * (1 << 20)
for stream in (sys.stdout, sys.stderr):
    try:
        for _ in range(4096):
            stream.write(block)
        stream.flush()
    except OSError:
        pass
"""
        + ADD,
        0.5,
    ),
    "fill_disk": (
        """
import os
block = b"x" * (1 << 20)
for name in range(400):
    try:
        with open("fill-%d" % name, "wb") as handle:
            for _ in range(64):
                handle.write(block)
    except OSError:
        pass
"""
        + ADD,
        0.5,
    ),
    "sys_exit": (
        """
import sys
def add(a, b):
    sys.exit(0)
""",
        0.0,
    ),
    "os_exit": (
        """
import os
os._exit(0)
"""
        + ADD,
        0.0,
    ),
}

ATTACKS["replace_builtins"] = (
    """
import builtins
builtins.isinstance = lambda *args: True
builtins.type = lambda *args: int
__builtins__["type"] = lambda *args: int
class AlwaysEqual:  # once passed `add(2, 2) == 5`; the returned-value guard refuses it now
    def __eq__(self, other):
        return True
def add(a, b):
    return AlwaysEqual()
""",
    0.0,
)


# Forged verdicts: code that runs when it chooses (a signal handler, which is handed the
# interrupted frame; a timer; a thread; a finalizer) walks up the frames to whatever
# reports the results and reports every test passed. Each ``add`` is wrong, so the honest
# score is 0; where the tests ran in the candidate's interpreter each of these scored 1.0.
_WALK = """
import os, signal, sys
def forge(signum, frame):
    while frame is not None:
        found = frame.f_locals
        if "say" in found and "passed_records" in found:
            {act}
        frame = frame.f_back
"""
_SAY_PASSED = """for record in found["passed_records"]:
                found["say"](record)
            found["say"](b" D")
            return"""
_WRITE_TO_PIPE = """for out in (found["fd"], 1, 2):
                for number in range(len(found["passed_records"])):
                    os.write(out, found["key"] + b" T %d 1\\n" % number)
                os.write(out, found["key"] + b" D\\n")
            return"""
_EXIT_AFTER_PASS = """for record in found["passed_records"]:
                found["say"](record)
            sys.stdout.write("T 0 1\\nT 1 1\\n")
            sys.stdout.flush()
            os._exit(0)"""
FORGERIES: dict[str, str] = {
    "signal_from_the_function": _WALK.format(act=_SAY_PASSED)
    + "signal.signal(signal.SIGUSR1, forge)\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGUSR1)\n    return 0\n",
    "timer": _WALK.format(act=_SAY_PASSED)
    + "signal.signal(signal.SIGALRM, forge)\nsignal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)\n"
    "def add(a, b):\n    for _ in range(200000):\n        pass\n    return 0\n",
    "thread": _WALK.format(act=_SAY_PASSED) + "import threading\nsignal.signal(signal.SIGUSR1, forge)\ndef add(a, b):\n"
    "    helper = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGUSR1))\n"
    "    helper.start()\n    helper.join()\n    return 0\n",
    "finalizer": _WALK.format(act=_SAY_PASSED)
    + "signal.signal(signal.SIGUSR1, forge)\nclass Bomb:\n    def __del__(self):\n"
    "        os.kill(os.getpid(), signal.SIGUSR1)\ndef add(a, b):\n    Bomb()\n    return 0\n",
    "verdict_lines_on_the_pipe_and_fd_1": _WALK.format(act=_WRITE_TO_PIPE)
    + "signal.signal(signal.SIGUSR1, forge)\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGUSR1)\n    return 0\n",
    "os_exit_after_printing_a_pass": _WALK.format(act=_EXIT_AFTER_PASS)
    + "signal.signal(signal.SIGUSR1, forge)\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGUSR1)\n"
    "    sys.stdout.write('T 0 1\\nT 1 1\\n')\n    sys.stdout.flush()\n    os._exit(0)\n",
    "always_equal": "class AlwaysEqual:\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = object.__hash__\ndef add(a, b):\n    return AlwaysEqual()\n",
}
FORGERY_TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4\n"


def target_fields(home: Path, output: Path, secret_pid: int) -> tuple[dict[str, Any], socket.socket]:
    """The ``str.format`` fields of the attacks, and the loopback listener they try to reach
    (the caller closes it)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.3)
    fields = {
        "home": home,
        "output": output,
        "marker": uuid.uuid4().hex,
        "port": listener.getsockname()[1],
        "parent_pid": os.getpid(),
        "secret_pid": secret_pid,
    }
    return fields, listener


def processes_with(marker: str) -> list[str]:
    """Live processes (zombies are dead) whose command line mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(f"{entry.name}: {cmdline[:100]}")
    return found


# the forged verdicts also run through `ape run` (tests/unit/checking/code/test_code_exec_run.py):
# each `add` is wrong, so against TESTS too their honest score is 0
ATTACKS.update({f"forged_{name}": (code, 0.0) for name, code in FORGERIES.items()})
