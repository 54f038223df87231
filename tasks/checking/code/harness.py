"""The program that runs candidate code: started (warm) inside the sandbox, used once.

This file is never imported by APE. :mod:`ape.tasks.checking.code.code_exec` reads its text and
runs it as ``python -I -c <text>``, so no path, key or channel appears in argv or in
the environment. It waits on stdin for one job (JSON, sent by the parent once a check
needs it), then:

1. reads the job, closes stdin, moves the result pipe to a random descriptor number
   and forgets the job text;
2. parses and compiles the candidate code and every test *before* any candidate code
   runs, and captures every function it reports with, so replacing ``json``,
   ``builtins.compile``, ``os.write`` or anything else later changes nothing;
3. applies the resource limits, installs an audit hook that refuses frame
   introspection, tracing, ``gc`` walks, ``ctypes`` and ``/proc``, and runs the code,
   then each test; every record it writes starts with the job's key, which the
   candidate never sees in argv, environment or any file.

The parent counts one record per test, in order, and only records with the key;
everything else (missing records, early exits, files) counts as not passed.

Wire format of a record (one line): ``KEY S`` (the job arrived; sent before anything
else, so the parent can tell a sandbox that never started from code that failed, and
start the time limit there), ``KEY T <index> 1`` (test passed), ``KEY T <index> 0
<reason>`` (failed), ``KEY E <reason>`` (nothing more will run: the code or a setup
statement failed) or ``KEY D`` (all tests ran).
"""

import os
import sys


def main():  # noqa: C901 - one straight line of setup, then the loop over tests
    read, write, close, dup2, urandom = os.read, os.write, os.close, os.dup2, os.urandom
    try:
        # a session (and process group) of its own: kill(0) by the candidate then reaches
        # nobody but itself, not the sandbox's launcher outside the namespace
        os.setsid()
    except OSError:
        pass  # already a session leader (bwrap --new-session, or no sandbox)
    # every builtin used once candidate code has run is bound here, before it can replace them
    run, Error, length, type_of, text_of = exec, BaseException, len, type, str
    chunks = []
    while True:
        chunk = read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    if not chunks:
        return  # the parent went away before giving a job
    # deferred on purpose: this program runs alone in the sandbox (never imported by APE) and
    # imports what it needs once its job has arrived
    import ast
    import json
    import resource
    import signal

    job = json.loads(b"".join(chunks).decode("utf-8"))
    del chunks
    key = job.pop("key").encode("ascii")
    fd = 3 + int.from_bytes(urandom(2), "little") % 900
    while fd == job["fd"]:
        fd += 1
    dup2(job["fd"], fd)
    close(job["fd"])
    try:  # the start record: the job is here and no candidate code has run yet
        write(fd, key + b" S\n")
    except OSError:
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    dup2(null, 0)
    close(null)
    code, tests = job.pop("code"), job.pop("tests")
    limits = job.pop("limits")

    def clean(text, limit=500):
        text = text if length(text) <= limit else text[:limit] + "..."
        return text.replace("\n", " ").encode("utf-8", "replace")

    def describe(exc, where):
        try:
            name = type_of(exc).__name__
            detail = text_of(exc)
        except Error:  # a hostile __str__ or __name__
            return "an exception that cannot be described" + where
        return (name + ": " + detail if detail else name) + where

    streams = (sys.stdout, sys.stderr)

    def say(record):
        if record[:2] in (b" D", b" E"):  # the parent stops the sandbox on these: flush first
            for stream in streams:
                try:
                    stream.flush()
                except Error:
                    pass
        try:
            write(fd, key + record + b"\n")
        except OSError:
            pass

    try:
        tree = ast.parse(tests, "tests.py")
    except SyntaxError as exc:
        say(b" E " + clean("the tests do not parse: " + describe(exc, "")))
        return
    units, count = [], 0
    if any(isinstance(node, ast.Assert) for node in tree.body):
        for node in tree.body:  # each top-level assert is one test, the rest is setup
            number = count if isinstance(node, ast.Assert) else -1
            count += number >= 0
            unit = compile(ast.Module(body=[node], type_ignores=[]), "tests.py", "exec")
            units.append((number, node.lineno, unit))
    elif tree.body:  # no top-level assert: the whole script is one test
        count = 1
        units.append((0, 1, compile(tree, "tests.py", "exec")))
    try:
        program = compile(code, "solution.py", "exec")
    except BaseException as exc:  # SyntaxError, ValueError (null bytes), RecursionError
        say(b" E " + clean("the code does not compile: " + describe(exc, "")))
        return
    passed_records = [b" T %d 1" % number for number in range(count)]
    failed_records = [b" T %d 0 " % number for number in range(count)]

    for name, value in (
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_CPU", limits["cpu_seconds"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_NPROC", limits["processes"]),
        ("RLIMIT_CORE", 0),
    ):
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (AttributeError, ValueError, OSError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full file is an error, not a kill
    os.chdir(job.pop("workdir"))
    del job, code, tests, tree

    blocked_events = frozenset(
        (
            "sys._getframe",
            "sys._current_frames",
            "sys._current_exceptions",
            "sys.settrace",
            "sys.setprofile",
            "gc.get_objects",
            "gc.get_referrers",
            "gc.get_referents",
            "ctypes.dlopen",
            "ctypes.dlsym",
            "ctypes.addressof",
            "ctypes.cdata",
            "ctypes.string_at",
            "ctypes.wstring_at",
            "ctypes.call_function",
        )
    )
    blocked_attributes = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"))

    def audit(
        event,
        args,
        blocked_events=blocked_events,
        blocked_attributes=blocked_attributes,
        length=length,
        is_a=isinstance,
        text=str,
        refuse=ValueError,
        deny=PermissionError,
    ):
        if event in blocked_events:
            raise refuse("code_exec does not allow " + event)
        if event == "object.__getattr__" and length(args) > 1 and args[1] in blocked_attributes:
            raise refuse("code_exec does not allow reading " + args[1])
        if event == "open" and args and is_a(args[0], text) and args[0].startswith("/proc"):
            raise deny("code_exec does not allow opening " + args[0])

    sys.addaudithook(audit)
    import builtins

    pristine = dict(builtins.__dict__)  # the tests get a fresh copy of these before each test
    copy_of = dict
    namespace = {"__name__": "solution", "__builtins__": copy_of(pristine)}
    try:
        run(program, namespace)
    except Error as exc:
        say(b" E " + clean("the code failed before the tests: " + describe(exc, "")))
        return
    for number, line, unit in units:
        namespace["__builtins__"] = copy_of(pristine)
        try:
            run(unit, namespace)
        except Error as exc:
            where = " (tests.py line %d)" % line  # noqa: UP031 - no str methods in the sandbox
            if number >= 0:
                say(failed_records[number] + clean(describe(exc, where)))
            else:
                say(b" E " + clean("test setup failed: " + describe(exc, where)))
                return
        else:
            if number >= 0:
                say(passed_records[number])
    say(b" D")


if __name__ == "__main__":  # run as `python -I -c <this text>`; importing it does nothing
    main()
