# mypy: disable-error-code="attr-defined,assignment,var-annotated,valid-type,misc,name-defined"
# ruff: noqa: F821 - send, receive, encode, decode, WireError and NotPlain come from wire.py's text, run before this one
"""The program that runs candidate code: started (warm) inside the sandbox, used once.

This file is never imported by APE. :mod:`ape.tasks.checking.code.code_exec` runs the text
of :mod:`ape.tasks.checking.code.wire` followed by this one as ``python -I -c <text>``, so
no path, key or channel appears in argv or in the environment.

Two processes. The verdict is computed where the candidate's code never runs:

- the **trusted process** (this program's first process) reads the job (JSON, on stdin),
  holds the result pipe to APE, parses and compiles the tests and runs them; it makes
  itself non-dumpable first, so no other process of the sandbox's user can read its
  memory or descriptors (``/proc/<pid>/fd``, ``ptrace``, ``pidfd_getfd``);
- the **solution process**, forked before the job arrives, closes every descriptor but
  its two pipes to the trusted process (stdin becomes ``/dev/null``; stdout and stderr
  stay the files APE keeps the tails of), waits for the code, applies the limits, runs
  the code and then answers calls: ``{"op": "call", "h": handle, "a": args, "k": kwargs}``
  with ``{"r": value}``, ``{"fn": handle}`` (a function it returned), ``{"o": handle}``
  (an instance made by calling one of its classes), ``{"x": [type, message]}`` (it raised)
  or ``{"n": what}`` (the result is not plain data), and ``"m"``: the new contents of list,
  dict and set arguments it was given; ``{"op": "get", "h": handle, "a": name}`` reads an
  attribute of such an instance.

The tests call the candidate's functions through proxies that send the function's handle
and plain-data arguments and decode the answer with :func:`decode`: only ``None``,
``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes`` and lists, tuples, dicts,
sets and frozensets of them cross, so an object of the candidate's cannot reach a test.
Whatever the candidate does in its process (signal handlers, finalizers, threads, frame
walks, ``os._exit``, writing to any descriptor it has, patching its builtins or modules)
can end that process or make its answers wrong, never write a record: it holds no
descriptor of the result pipe and its process holds nothing of the trusted one.
A candidate's exception crosses as (type name, message) and is raised in the tests as the
builtin exception of that name (``ValueError``) or as :class:`SolutionError`.

Wire format of a record to APE (one line): ``KEY S`` (the job arrived; sent before
anything else, so the parent can tell a sandbox that never started from code that failed,
and start the time limit there), ``KEY T <index> 1`` (test passed), ``KEY T <index> 0
<reason>`` (failed), ``KEY E <reason>`` (nothing more will run: the code, a setup
statement or the solution process failed) or ``KEY D`` (all tests ran).
"""

import builtins
import os
import sys

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4
_SHARED_STATEMENTS = ("Import", "ImportFrom", "FunctionDef", "AsyncFunctionDef", "ClassDef")


class SolutionError(Exception):
    """An exception of the solution's whose type is not a builtin exception (its name leads the message)."""


class SolutionGone(BaseException):
    """The solution process ended or broke the protocol: every test from here on fails."""


def _prctl(option, value):
    """True when prctl(option, value) worked; False off Linux or without ctypes."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


def _names(tree):  # noqa: C901 - one walk over the tests, for speed
    """What the tests name, in one walk of their syntax tree: ``(loaded, bound)``.

    ``loaded``: per top-level statement, the names it reads (``x`` in ``f(x)``), at any
    depth. ``bound``: every name the tests bind anywhere (assigned, defined, imported, a
    parameter).
    """
    import ast

    loaded, bound = [], set()
    for statement in tree.body:
        names = set()
        for node in ast.walk(statement):
            if isinstance(node, ast.Name):
                (names if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.Import):
                bound.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                bound.update(alias.asname or alias.name for alias in node.names)
        loaded.append(names)
    return loaded, bound


def _describe(exc, where=""):
    """``Type: message`` of an exception, safe against a hostile ``__str__`` or ``__name__``."""
    try:
        name = type.__dict__["__name__"].__get__(type(exc))
        detail = str(exc)
    except BaseException:
        return "an exception that cannot be described" + where
    return (name + ": " + detail if detail else name) + where


# --- the solution process --------------------------------------------------------------


def _keep_only(keep):
    """Close every descriptor above 2 but ``keep``: the result pipe, the job pipe, all of them."""
    folder = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    for fd in sorted(int(name) for name in os.listdir(folder)):
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _enter_solution(requests, answers, trusted):
    """The child's start: only its two pipes, a session of its own, the start message, the
    limits and the working folder; it exits when the trusted process is gone first."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _keep_only((requests, answers))
    try:
        os.setsid()  # kill(0) by the candidate reaches its own group, not the trusted process
    except OSError:
        pass
    if _prctl(_PR_SET_PDEATHSIG, 9) and os.getppid() != trusted:  # the trusted process is already gone
        os._exit(0)
    start = receive(requests)
    if start is None:
        os._exit(0)
    import resource
    import signal

    for name, value in start["limits"]:
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (AttributeError, ValueError, OSError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full file is an error, not a kill
    os.chdir(start["workdir"])
    return start


def _replier(answers):
    """The child's ``(reply, flush)``: its output streams as they are before the candidate's
    code runs are flushed before each reply; the child exits when the pipe is gone."""
    streams = (sys.stdout, sys.stderr)

    def flush():
        for stream in streams:
            try:
                stream.flush()
            except BaseException:
                pass

    def reply(message):
        flush()
        try:
            send(answers, message)
        except OSError:
            os._exit(0)

    return reply, flush


def _run_code(start, reply):
    """The candidate's namespace after its code ran; the child exits with an ``e`` reply when
    the code does not compile or fails."""
    namespace = {"__name__": "solution"}
    try:
        program = compile(start["code"], "solution.py", "exec")
    except BaseException as exc:  # SyntaxError, ValueError (null bytes), RecursionError
        reply({"e": "the code does not compile: " + _describe(exc)})
        os._exit(0)
    try:
        exec(program, namespace)
    except BaseException as exc:
        reply({"e": "the code failed before the tests: " + _describe(exc)})
        os._exit(0)
    return namespace


def _handles():
    """The child's table of objects the tests hold by number, and the function that adds one."""
    import threading

    handles, lock = [], threading.Lock()

    def handle_of(value):
        with lock:
            handles.append(value)
            return len(handles) - 1

    return handles, handle_of


def _names_shown(start, namespace, handle_of):
    """How the tests will see each of the solution's names they use."""

    def what(value):
        if isinstance(value, type(os)):
            return ["module", getattr(value, "__name__", "")]
        if callable(value):
            return ["fn", handle_of(value)]
        try:
            return ["data", encode(value)]
        except NotPlain as exc:
            return ["bad", str(exc)]

    names = []
    for name in start["names"]:
        if name in namespace:
            value = namespace[name]
            same_builtin = getattr(builtins, name, names) is value
            names.append([name, ["builtin"] if same_builtin else what(value)])
    return names


def _answer(function, getting, args, kwargs, result, handle_of):
    """The answer to one call: the new contents of its list, dict and set arguments, then its
    result as a handle, an instance's handle, plain data or the reason it is not plain."""
    answer = {}
    changed = []
    for position, argument in [*enumerate(args), *kwargs.items()]:
        if type(argument) in (list, dict, set):
            try:
                changed.append([position, encode(argument)])
            except NotPlain as exc:
                answer["m_bad"] = str(exc)
    answer["m"] = changed
    if callable(result) and not isinstance(result, type):
        answer["fn"] = handle_of(result)
    elif isinstance(function, type) and type(result) is function and not getting:
        answer["o"] = handle_of(result)  # an instance of its class, made by calling the class
    else:
        try:
            answer["r"] = encode(result)
        except NotPlain as exc:
            answer["n"] = str(exc)
    return answer


def _serve_calls(requests, answers, replier, handles, handle_of):
    """Answer the trusted process's calls until it closes the pipe (or breaks the protocol)."""
    reply, flush = replier
    while True:
        try:
            message = receive(requests)
        except WireError:
            os._exit(0)
        if message is None:
            flush()
            os._exit(0)
        try:
            function = handles[message["h"]]
            getting = message["op"] == "get"
            args = [] if getting else decode(message["a"])
            kwargs = {} if getting else decode(message["k"])
        except BaseException as exc:
            reply({"x": ["SolutionError", "the call could not be read: " + _describe(exc)]})
            continue
        try:
            # an attribute of an instance it made, or a call
            result = getattr(function, message["a"]) if getting else function(*args, **kwargs)
        except BaseException as exc:
            try:
                name = type.__dict__["__name__"].__get__(type(exc))
                detail = str(exc)
            except BaseException:
                name, detail = "SolutionError", "an exception that cannot be described"
            reply({"x": [name, detail]})
            continue
        try:
            send(answers, _answer(function, getting, args, kwargs, result, handle_of))
        except NotPlain as exc:
            reply({"n": str(exc)})
        except OSError:
            os._exit(0)
        flush()


def _solution_process(requests, answers, trusted):
    """The child: run the candidate's code, then answer the trusted process's calls until EOF."""
    start = _enter_solution(requests, answers, trusted)
    replier = _replier(answers)
    reply = replier[0]
    namespace = _run_code(start, reply)
    handles, handle_of = _handles()
    names = _names_shown(start, namespace, handle_of)
    for statement in start["setup"]:  # the tests' own helpers (a HumanEval preamble's), for the code to call
        try:
            exec(compile(statement, "tests.py", "exec"), namespace)
        except BaseException:
            pass
    reply({"names": names})
    _serve_calls(requests, answers, replier, handles, handle_of)


# --- the trusted process ---------------------------------------------------------------

_PLAIN_WORDS = "not plain data (numbers, strings, bytes, None, bools and lists, tuples, dicts and sets of them)"


class _Solution:
    """The trusted side of the pipes to the solution process: calls, and what went wrong."""

    def __init__(self, pid, requests, answers):
        self.pid, self.requests, self.answers = pid, requests, answers
        self.refused = []  # refusals since the tests last asked: they fail the test even when caught
        self.gone = None  # why the solution process cannot answer any more

    def exchange(self, message):
        """Send one message, read its answer; SolutionGone when the process ended or broke the protocol."""
        if self.gone is None:
            try:
                send(self.requests, message)
                answer = receive(self.answers)
            except OSError:
                answer = None
            except WireError as exc:
                self.gone = "the solution process sent " + str(exc)
                answer = None
            if answer is None and self.gone is None:
                self.gone = "the solution process ended (" + self.exit_status() + ")"
        if self.gone is not None:
            raise SolutionGone(self.gone)
        return answer

    def exit_status(self):
        """``exit code N`` or ``killed by signal N`` of the solution process, waiting briefly."""
        import time

        for _ in range(50):
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return "exit code unknown"
            if pid:
                if os.WIFSIGNALED(status):
                    return "killed by signal %d" % os.WTERMSIG(status)  # noqa: UP031 - plain and fast
                return "exit code %d" % os.WEXITSTATUS(status)  # noqa: UP031
            time.sleep(0.01)
        return "it closed its pipe"

    def refuse(self, problem):
        if problem not in self.refused:
            self.refused.append(problem)

    def call(self, handle, name, args, kwargs):
        """Call the solution's function ``handle`` with plain-data arguments; its plain result."""
        try:
            message = {"op": "call", "h": handle, "a": encode(list(args)), "k": encode(dict(kwargs))}
        except NotPlain as exc:
            raise TypeError(
                name + "() was given " + str(exc) + "; code_exec passes only plain data to the solution's process"
            ) from None
        answer = self.exchange(message)
        try:
            return self._result(answer, name + "()", args, kwargs)
        except WireError as exc:
            self.gone = "the solution process sent " + str(exc)
            raise SolutionGone(self.gone) from None

    def _result(self, answer, label, args, kwargs):  # noqa: C901 - one branch per kind of answer
        """What the tests get for ``answer`` to ``label`` (``add()``, ``Box().items``)."""
        if "x" in answer:
            kind, detail = answer["x"]
            if type(kind) is not str or type(detail) is not str:
                raise WireError("an exception that is not (name, message)")
            builtin = getattr(builtins, kind, None)
            error = None
            if isinstance(builtin, type) and issubclass(builtin, Exception):
                try:
                    error = builtin(detail)
                except TypeError:  # one that takes other arguments (UnicodeDecodeError)
                    pass
            raise error if error is not None else SolutionError(kind + ": " + detail)
        self._write_back(answer, label, args, kwargs)
        if "n" in answer:
            problem = label + " returned " + str(answer["n"]) + ", " + _PLAIN_WORDS
            self.refuse(problem)
            raise NotPlainData(problem)
        if "fn" in answer or "o" in answer:
            handle = answer.get("fn", answer.get("o"))
            if type(handle) is not int:
                raise WireError("a handle that is not a number")
            if "o" in answer:
                return _Instance(self, handle, label)
            return _proxy(self, handle, label)
        if "r" not in answer:
            raise WireError("an answer without a result")
        return decode(answer["r"])

    def attribute(self, handle, name, attribute):
        """An attribute of an instance in the solution process: plain data, or a method as a proxy."""
        answer = self.exchange({"op": "get", "h": handle, "a": attribute})
        try:
            return self._result(answer, name + "." + attribute, (), {})  # read, not called
        except WireError as exc:
            self.gone = "the solution process sent " + str(exc)
            raise SolutionGone(self.gone) from None

    def _write_back(self, answer, label, args, kwargs):
        """The list, dict and set arguments get the contents the solution left in them."""
        if "m_bad" in answer:
            self.refuse(label + " put " + str(answer["m_bad"]) + " into an argument it was given")
        changed = answer.get("m", [])
        if type(changed) is not list:
            raise WireError("argument contents that are not a list")
        for entry in changed:
            if type(entry) is not list or len(entry) != 2:
                raise WireError("an argument entry that is not [position, value]")
            position, value = entry
            if type(position) is int and 0 <= position < len(args):
                target = args[position]
            elif type(position) is str and position in kwargs:
                target = kwargs[position]
            else:
                raise WireError("an argument the call did not have")
            value = decode(value)
            if type(value) is not type(target):
                raise WireError("an argument whose type changed")
            if value != target:
                target.clear()
                if type(target) is list:
                    target.extend(value)
                else:
                    target.update(value)


class NotPlainData(Exception):
    """Raised to the tests in place of a result that is not plain data."""


class _Instance:
    """The tests' view of an instance of the solution's class: its attributes, read across the boundary.

    Only attributes cross (plain data, or methods as proxies); no special method does, so
    ``==``, ``hash``, ``bool`` and ``str`` of it are this object's own, which the solution
    cannot answer.
    """

    __slots__ = ("_solution", "_handle", "_name")

    def __init__(self, solution, handle, name):
        object.__setattr__(self, "_solution", solution)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return self._solution.attribute(self._handle, self._name, attribute)

    def __repr__(self):
        return "<" + self._name + " in the solution's process>"


def _proxy(solution, handle, name):
    """The tests' view of one of the solution's functions: a call across the process boundary."""

    def call(*args, **kwargs):
        return solution.call(handle, name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _standard_module(name):
    """The trusted process's own copy of a standard-library module the solution imported, or None.

    Only the standard library (or a module already loaded here): the name comes from the
    solution, and importing runs the module's code in the trusted process.
    """
    import importlib

    top = name.split(".")[0]
    if name not in sys.modules and top not in sys.stdlib_module_names:
        return None
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _fork_solution():
    """Start the solution process; (pid, requests fd, answers fd) as the trusted process holds them."""
    to_child, from_parent = os.pipe()[::-1]
    from_child, to_parent = os.pipe()
    trusted = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(to_child)
            os.close(from_child)
            _solution_process(from_parent, to_parent, trusted)
        finally:
            os._exit(0)
    os.close(from_parent)
    os.close(to_parent)
    return pid, to_child, from_child


def _isolate():
    """A session of its own and not dumpable, before anything else (fail closed)."""
    try:
        # a session (and process group) of its own: kill(0) by the candidate then reaches
        # nobody but its own process
        os.setsid()
    except OSError:
        pass  # already a session leader (bwrap --new-session, or no sandbox)
    linux = sys.platform.startswith("linux")
    if not _prctl(_PR_SET_DUMPABLE, 0) and linux:
        # fail closed: without it the solution process could read this one's descriptors
        sys.stderr.write("code_exec harness: prctl(PR_SET_DUMPABLE, 0) failed\n")
        sys.exit(3)


def _read_job():
    """The job from stdin (None when the parent went away first); the start record is sent
    and stdin becomes /dev/null. Called after the solution process was forked."""
    import json

    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    if not chunks:
        return None
    job = json.loads(b"".join(chunks).decode("utf-8"))
    del chunks
    job["key"] = job.pop("key").encode("ascii")
    try:  # the start record: the job is here and no candidate code has run yet
        os.write(job["fd"], job["key"] + b" S\n")
    except OSError:
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return job


def _clean(text, limit=500):
    text = text if len(text) <= limit else text[:limit] + "..."
    return text.replace("\n", " ").encode("utf-8", "replace")


def _sayer(key, fd):
    """The writer of records to APE (``say(b" T 3 1")``)."""

    def say(record):
        if record[:2] in (b" D", b" E"):  # the parent stops the sandbox on these: flush first
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
        try:
            os.write(fd, key + record + b"\n")
        except OSError:
            pass

    return say


def _compile_tests(tests):
    """The tests as units (number or -1 for setup, [(line, code)], names loaded), the names
    they load and bind, and the statements the solution runs first; SyntaxError when they do
    not parse. The text and its tree end with this frame."""
    import ast

    tree = ast.parse(tests, "tests.py")
    # the tests' leading `from __future__` imports go first in every statement compiled alone
    future = []
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            break
        future.append(node)
    statements = []
    for node in tree.body:
        body = [node] if node in future else [*future, node]
        statements.append((node, compile(ast.Module(body=body, type_ignores=[]), "tests.py", "exec")))
    loaded, bound = _names(tree)
    units, count = [], 0
    if any(isinstance(node, ast.Assert) for node in tree.body):
        for (node, unit), names in zip(statements, loaded):  # each top-level assert is one test, the rest is setup
            number = count if isinstance(node, ast.Assert) else -1
            count += number >= 0
            units.append((number, [(node.lineno, unit)], names))
    elif tree.body:  # no top-level assert: the whole script is one test, run statement by statement
        units.append((0, [(node.lineno, unit) for node, unit in statements], set().union(*loaded)))
    shared = [
        ast.unparse(ast.Module(body=[*future, node], type_ignores=[]))
        for node in tree.body
        if type(node).__name__ in _SHARED_STATEMENTS and node not in future
    ]
    return units, set().union(*loaded), bound, shared


def _limit(rlimits, workdir):
    """This process's limits, set once the solution has started (its own are set there)."""
    import resource
    import signal

    for name, value in rlimits:
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (AttributeError, ValueError, OSError):
            pass
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full file is an error, not a kill
    os.chdir(workdir)


def _bind_names(solution, names, loaded, bound, pristine):
    """The tests' namespace from the names the solution bound, and the names it poisoned
    (bound to what the tests may not see) with the reason."""
    tests_namespace = {"__name__": "solution"}
    poisoned = {}
    for name, (kind, *rest) in names:
        if type(name) is not str or name not in loaded or type(kind) is not str:
            continue
        if name in pristine and name not in bound:
            if kind != "builtin":
                poisoned[name] = (
                    "the solution defines " + name + ", a builtin name the tests use; code_exec lets no "
                    "solution change what the tests' builtins mean (rename it)"
                )
        elif kind == "fn" and type(rest[0]) is int:
            tests_namespace[name] = _proxy(solution, rest[0], name)
        elif kind == "module" and type(rest[0]) is str:
            module = _standard_module(rest[0])
            if module is None:
                poisoned[name] = (
                    "the tests use " + name + ", which the solution bound to a module outside the standard library"
                )
            else:
                tests_namespace[name] = module
        elif kind == "data":
            tests_namespace[name] = decode(rest[0])
        elif kind == "bad":
            poisoned[name] = "the tests use " + name + ", which the solution bound to " + str(rest[0])
    return tests_namespace, poisoned


def _setup(say, solution, job):
    """The tests compiled, the solution started with the code, this process limited and the
    tests' namespace bound: (units, namespace, poisoned, pristine), or None once an ``E``
    record said why not. The job's text is gone from every frame before the solution's
    answer is read."""
    try:
        units, loaded, bound, shared = _compile_tests(job.pop("tests"))
    except SyntaxError as exc:
        say(b" E " + _clean("the tests do not parse: " + _describe(exc)))
        return None
    limits = job["limits"]
    rlimits = [
        ["RLIMIT_AS", limits["memory_bytes"]],
        ["RLIMIT_CPU", limits["cpu_seconds"]],
        ["RLIMIT_FSIZE", limits["file_bytes"]],
        ["RLIMIT_NOFILE", limits["open_files"]],
        ["RLIMIT_NPROC", limits["processes"]],
        ["RLIMIT_CORE", 0],
    ]
    start = {"code": job.pop("code"), "setup": shared, "names": sorted(loaded), "limits": rlimits}
    start["workdir"] = job["workdir"]
    job.clear()
    try:
        ready = solution.exchange(start)
    except SolutionGone as exc:
        say(b" E " + _clean("the code failed before the tests: " + str(exc)))
        return None
    _limit(rlimits, start["workdir"])
    if "e" in ready:
        say(b" E " + _clean(str(ready["e"])))
        return None
    pristine = dict(builtins.__dict__)  # the tests get a fresh copy of these before each test
    try:
        tests_namespace, poisoned = _bind_names(solution, ready["names"], loaded, bound, pristine)
    except (WireError, TypeError, ValueError, LookupError) as exc:
        say(b" E " + _clean("the solution process sent names that could not be read: " + _describe(exc)))
        return None
    return units, tests_namespace, poisoned, pristine


def _run_tests(say, solution, units, tests_namespace, poisoned, pristine):
    """Each unit in order, with fresh builtins: a ``T`` record per test, ``E`` when setup
    fails or the solution process is gone, ``D`` when all ran."""
    for number, unit_statements, names in units:
        tests_namespace["__builtins__"] = dict(pristine)
        problem = None
        for name in poisoned:
            if name in names:
                problem = poisoned[name]
                break
        solution.refused = []
        for line, unit in unit_statements if problem is None else ():
            try:
                exec(unit, tests_namespace)
            except BaseException as exc:
                problem = _describe(exc, " (tests.py line %d)" % line)  # noqa: UP031 - plain and fast
                break
        if solution.refused:
            problem = "; ".join(solution.refused)
        if solution.gone is not None and problem is None:
            problem = solution.gone
        if problem is None:
            if number >= 0:
                say(b" T %d 1" % number)
        elif number >= 0:
            say(b" T %d 0 " % number + _clean(problem))
        else:
            say(b" E " + _clean("test setup failed: " + problem))
            return
        if solution.gone is not None:
            say(b" E " + _clean(solution.gone))
            return
    say(b" D")


def main():
    """The guard's order: not dumpable before the solution process forks, the job read after
    the fork, the job's text gone before the solution's answer is read, this process's limits
    set after the solution started; then the test loop."""
    _isolate()
    import signal

    # as the namespace's init, a signal left at its default is ignored when sent from inside:
    # the candidate cannot interrupt the tests with SIGINT (Python's own handler would raise)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    pid, requests, answers = _fork_solution()
    job = _read_job()
    if job is None:
        return  # the parent went away before giving a job
    say = _sayer(job.pop("key"), job.pop("fd"))
    solution = _Solution(pid, requests, answers)
    prepared = _setup(say, solution, job)
    del job
    if prepared is not None:
        _run_tests(say, solution, *prepared)


if __name__ == "__main__":  # run as `python -I -c <this text>`; importing it does nothing
    main()
